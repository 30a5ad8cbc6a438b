import * as React from 'react';

import { errorText, formatMoney } from '../format';
import { usePoll } from '../poll';
import { requestAPI } from '../request';
import { IRecipe } from '../tokens';

/** `208.00 CNY` (from the server's estimate), or why the recipe could not be priced. */
export function recipeCost(recipe: IRecipe): string {
  return typeof recipe.cost === 'string' ? recipe.cost : formatMoney(recipe.cost.amount, recipe.cost.currency);
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

// Layout only (the theme's variables give colours): this section's look lives with it.
const SUMMARY: React.CSSProperties = { display: 'flex', gap: '0.5em', alignItems: 'baseline', cursor: 'pointer' };
const NAME: React.CSSProperties = { fontWeight: 600, flex: '0 0 auto' };
const TITLE: React.CSSProperties = { flex: '1 1 auto', color: 'var(--jp-ui-font-color2)', overflow: 'hidden' };
const COST: React.CSSProperties = { flex: '0 0 auto', fontVariantNumeric: 'tabular-nums' };
const LIST: React.CSSProperties = { listStyle: 'none', margin: 0, padding: 0 };
const ROW: React.CSSProperties = { padding: '2px 0', borderBottom: '1px solid var(--jp-border-color2)' };

/** One recipe: name, what it does, resources and cost; its parameters with defaults when opened. */
function RecipeRow(props: { recipe: IRecipe }): JSX.Element {
  const { recipe } = props;
  const repro = recipe.reproduction;
  return (
    <li className="jp-Starverse-recipe" data-recipe={recipe.name} data-runner={recipe.runner} style={ROW}>
      <details>
        <summary style={SUMMARY}>
          <span className="jp-Starverse-recipeName" style={NAME}>
            {recipe.name}
          </span>
          <span className="jp-Starverse-recipeTitle" style={TITLE}>
            {recipe.title}
          </span>
          <span className="jp-Starverse-recipeCost" style={COST} title={recipeResources(recipe)}>
            {recipeCost(recipe)}
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
        <ul className="jp-Starverse-recipeList" style={LIST}>
          {recipes.map(r => (
            <RecipeRow key={r.name} recipe={r} />
          ))}
        </ul>
      )}
    </div>
  );
}
