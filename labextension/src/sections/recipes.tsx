import * as React from 'react';

import { errorText, formatMoney, formatMoneyCompact } from '../format';
import { usePoll } from '../poll';
import { requestAPI } from '../request';
import { IRecipe } from '../tokens';

/** `208.00 CNY` (from the server's estimate), or why the recipe could not be priced. */
export function recipeCost(recipe: IRecipe): string {
  return typeof recipe.cost === 'string' ? recipe.cost : formatMoney(recipe.cost.amount, recipe.cost.currency);
}

/** The cost as the narrow row shows it (`1.20M CNY`); the exact figure is its title. */
function recipeCostShort(recipe: IRecipe): string {
  return typeof recipe.cost === 'string'
    ? recipe.cost
    : formatMoneyCompact(recipe.cost.amount, recipe.cost.currency);
}

/** `8 x a100-80g · 4 h` for a recipe, the published set-up for a reproduction. */
export function recipeResources(recipe: IRecipe): string {
  const top = recipe.reproduction?.published;
  if (top) {
    const days = top.hours >= 48 ? ` (${top.hours / 24} days)` : '';
    return `${top.cards} x ${top.gpu} · ${top.hours} h${days}`;
  }
  const r = recipe.resources;
  return `${r.nodes * r.procs_per_node} x ${r.accelerator} · ${r.hours} h`;
}

// Layout: style/base.css (.jp-Starverse-recipe*): two lines, the name and the cost on the first
// (the cost never shrinks), the title on the second, both ellipsed with the full text on hover.

/** One recipe: name, what it does, resources and cost; its parameters with defaults when opened. */
function RecipeRow(props: { recipe: IRecipe }): JSX.Element {
  const { recipe } = props;
  const repro = recipe.reproduction;
  return (
    <li className="jp-Starverse-recipe" data-recipe={recipe.name} data-runner={recipe.runner}>
      <details>
        <summary className="jp-Starverse-recipeSummary">
          <span className="jp-Starverse-recipeLine">
            <span className="jp-Starverse-recipeName" title={recipe.name}>
              {recipe.name}
            </span>
            <span
              className="jp-Starverse-recipeCost"
              title={`${recipeCost(recipe)} · ${recipeResources(recipe)}`}
            >
              {recipeCostShort(recipe)}
            </span>
          </span>
          <span className="jp-Starverse-recipeTitle" title={recipe.title}>
            {recipe.title}
          </span>
        </summary>
        <div className="jp-Starverse-recipeBody">
          <p>{recipe.description}</p>
          <p>
            {recipe.objective} · {recipe.runner} · {recipe.templates.join('/')} · {recipeResources(recipe)}
          </p>
          <p className="jp-Starverse-recipeData">data: {recipe.data_format}</p>
          {repro && (
            <p className="jp-Starverse-recipeRepro">
              reproduces {repro.model} {repro.stage} ({repro.source})
              {repro.caveat && <span title={repro.caveat}> · small CPU configuration included</span>}
            </p>
          )}
          <table className="jp-Starverse-recipeParams">
            <tbody>
              {recipe.params.map(p => (
                <tr key={p.name} title={p.help}>
                  <td>{p.name}</td>
                  <td>{String(p.default)}</td>
                </tr>
              ))}
            </tbody>
          </table>
          <code className="jp-Starverse-recipeCommand">
            %%sv train --recipe {recipe.name} --model hf:ORG/NAME --data DATASET
          </code>
        </div>
      </details>
    </li>
  );
}

/** The recipe catalog: every recipe with its defaults and the cost of its default resources. */
export function RecipesSection(): JSX.Element {
  const [recipes, setRecipes] = React.useState<IRecipe[] | null>(null);
  const [error, setError] = React.useState<string | null>(null);
  const load = async (): Promise<void> => {
    try {
      setRecipes(await requestAPI<IRecipe[]>(['recipes']));
      setError(null);
    } catch (reason) {
      setError(errorText(reason));
      throw reason;
    }
  };
  usePoll('starverse-recipes', 5 * 60 * 1000, load);
  return (
    <div className="jp-Starverse-recipes">
      {error && <div className="jp-Starverse-error">{error}</div>}
      {recipes === null && !error && <div>Loading recipes…</div>}
      {recipes !== null && (
        <ul className="jp-Starverse-recipeList">
          {recipes.map(r => (
            <RecipeRow key={r.name} recipe={r} />
          ))}
        </ul>
      )}
    </div>
  );
}
