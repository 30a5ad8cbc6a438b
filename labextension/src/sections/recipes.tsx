import * as React from 'react';

import { errorText, formatMoney, formatMoneyCompact } from '../format';
import { usePolled } from '../poll';
import { requestAPI } from '../request';
import { IJob } from '../tokens/jobs';
import { IRecipe } from '../tokens/recipes';

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

/** What a launch from the panel sends: every field filled from the recipe (its small set-up on CPU). */
export interface ILaunchFields {
  nodes: number;
  gpus: number;
  accelerator: string;
  model: string;
  data: string;
  small: boolean;
}

/** The fields a recipe fills: its default topology, model and data; `small`: one CPU process on the tiny ones. */
export function launchFields(recipe: IRecipe, small: boolean): ILaunchFields {
  const repro = recipe.reproduction;
  if (small && repro?.small_model) {
    return { nodes: 1, gpus: 1, accelerator: 'cpu', model: repro.small_model, data: repro.small_data, small };
  }
  const r = recipe.resources;
  return {
    nodes: r.nodes,
    gpus: r.procs_per_node,
    accelerator: r.accelerator,
    model: repro?.model_ref ?? '',
    data: repro?.data_ref ?? '',
    small
  };
}

/** A whole-number field of the launch form (at least 1). */
function CountField(props: {
  label: string;
  name: string;
  value: number;
  onChange: (value: number) => void;
}): JSX.Element {
  return (
    <label>
      {props.label}{' '}
      <input
        type="number"
        name={props.name}
        min={1}
        value={props.value}
        onChange={e => props.onChange(Number(e.target.value))}
      />
    </label>
  );
}

/** Launch a recipe: topology, model and data pre-filled (editable); the small CPU set-up of a reproduction. */
function LaunchForm(props: { recipe: IRecipe }): JSX.Element {
  const { recipe } = props;
  const canSmall = Boolean(recipe.reproduction?.small_model);
  const [fields, setFields] = React.useState<ILaunchFields>(() => launchFields(recipe, canSmall));
  const [note, setNote] = React.useState<string | null>(null);
  const [busy, setBusy] = React.useState(false);
  const set = (patch: Partial<ILaunchFields>): void => setFields({ ...fields, ...patch });
  const launch = async (): Promise<void> => {
    setBusy(true);
    setNote(null);
    try {
      const job = await requestAPI<IJob>(['recipes', recipe.name, 'launch'], {
        method: 'POST',
        body: JSON.stringify({
          model: fields.model,
          data: fields.data
            .split(',')
            .map(d => d.trim())
            .filter(d => d),
          small: fields.small,
          job: { nodes: fields.nodes, procs_per_node: fields.gpus, accelerator: fields.accelerator }
        })
      });
      setNote(`launched ${job.id}`);
    } catch (reason) {
      setNote(errorText(reason));
    } finally {
      setBusy(false);
    }
  };
  return (
    <div className="jp-Starverse-recipeLaunch">
      {canSmall && (
        <label title="one CPU process on the tiny model and generated data (built into the store on first use)">
          <input
            type="checkbox"
            name="small"
            checked={fields.small}
            onChange={e => setFields(launchFields(recipe, e.target.checked))}
          />{' '}
          small (CPU)
        </label>
      )}
      <CountField label="nodes" name="nodes" value={fields.nodes} onChange={nodes => set({ nodes })} />
      <CountField
        label={fields.accelerator === 'cpu' ? 'procs' : 'gpus'}
        name="gpus"
        value={fields.gpus}
        onChange={gpus => set({ gpus })}
      />
      <label>
        model{' '}
        <input
          type="text"
          name="model"
          value={fields.model}
          placeholder="hf:ORG/NAME"
          onChange={e => set({ model: e.target.value })}
        />
      </label>
      <label>
        data{' '}
        <input
          type="text"
          name="data"
          value={fields.data}
          placeholder="DATASET"
          onChange={e => set({ data: e.target.value })}
        />
      </label>
      <button className="jp-mod-styled jp-mod-accept" disabled={busy} onClick={() => void launch()}>
        Launch
      </button>
      {note && <span className="jp-Starverse-recipeLaunchNote">{note}</span>}
    </div>
  );
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
              {repro.trains && <> · trains {repro.trains}</>}
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
            {repro?.small_model
              ? `%%sv train --recipe ${recipe.name} --small`
              : `%%sv train --recipe ${recipe.name} --model hf:ORG/NAME --data DATASET`}
          </code>
          <LaunchForm recipe={recipe} />
        </div>
      </details>
    </li>
  );
}

/** The recipe catalog: every recipe with its defaults and the cost of its default resources. */
export function RecipesSection(): JSX.Element {
  const { value: recipes, error } = usePolled('starverse-recipes', 5 * 60 * 1000, () =>
    requestAPI<IRecipe[]>(['recipes'])
  );
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
