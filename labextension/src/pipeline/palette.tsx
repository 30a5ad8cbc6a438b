/**
 * The pipeline editor's palette: the training templates, the data preparation and evaluation steps,
 * the recipes, and the datasets and models of the catalog, each an item dragged onto the canvas
 * (it carries an `IPaletteItem` under `DRAG_TYPE`; the canvas turns the drop into a node).
 */
import * as React from 'react';

import { IStoreEntry } from '../tokens/store';
import { DRAG_TYPE, IPaletteItem } from './graph';

/** What the palette shows of a recipe (`GET recipes`: `Recipe.to_json()`). */
export interface IRecipeItem {
  name: string;
  title: string;
}

const PREP: IPaletteItem[] = [
  { kind: 'prep', label: 'Prep · clean (de-identify)', step: 'clean' },
  { kind: 'prep', label: 'Prep · dedup', step: 'dedup' },
  { kind: 'prep', label: 'Prep · score (quality)', step: 'score' }
];

/** An evaluation step: `starverse eval` on the model drawn into it (or the training step before it). */
const EVAL: IPaletteItem = { kind: 'eval', label: 'Eval · score a model on a labelled set' };

const TEMPLATES: IPaletteItem[] = [
  { kind: 'train', label: 'Train · DDP (data parallel)', template: 'ddp' },
  { kind: 'train', label: 'Train · FSDP (sharded)', template: 'fsdp' },
  { kind: 'train', label: 'Train · TP (tensor parallel)', template: 'tp' },
  { kind: 'train', label: 'Train · PP (pipeline parallel)', template: 'pp' }
];

function PaletteItem(props: { item: IPaletteItem; detail?: string }): JSX.Element {
  return (
    <div
      className={`jp-SvPipeline-paletteItem jp-SvPipeline-${props.item.kind}`}
      draggable
      data-palette-kind={props.item.kind}
      data-palette-ref={props.item.ref ?? props.item.template ?? props.item.step ?? props.item.recipe ?? ''}
      title={props.detail ?? 'drag onto the canvas'}
      onDragStart={event => {
        event.dataTransfer.setData(DRAG_TYPE, JSON.stringify(props.item));
        event.dataTransfer.effectAllowed = 'copy';
      }}
    >
      {props.item.label}
    </div>
  );
}

/** Datasets and models of the catalog, and the steps; all draggable onto the canvas. */
export function Palette(props: {
  entries: IStoreEntry[];
  recipes: IRecipeItem[];
  prep: boolean;
  error: string | null;
}): JSX.Element {
  // a Hub dataset repo is a dataset node like any other: it is mounted the same way
  const datasets = props.entries.filter(e => e.kind === 'dataset' || e.kind === 'hf-dataset');
  const models = props.entries.filter(e => e.kind === 'model');
  const entry = (e: IStoreEntry): JSX.Element => (
    <PaletteItem
      key={e.ref}
      item={{ kind: e.kind === 'model' ? 'model' : 'dataset', label: e.ref, ref: e.ref }}
      detail={`${e.state}${e.path ? `: ${e.path}` : ''} — drop onto a training step to mount it`}
    />
  );
  return (
    <div className="jp-SvPipeline-palette">
      <h3>Steps</h3>
      {TEMPLATES.map(t => (
        <PaletteItem key={t.template} item={t} />
      ))}
      {props.prep && <h3>Data preparation</h3>}
      {props.prep && PREP.map(p => <PaletteItem key={p.step} item={p} detail="runs in the workspace; drop a dataset onto it" />)}
      <h3>Evaluation</h3>
      <PaletteItem item={EVAL} detail="drop a model (or draw a training step) and a labelled dataset onto it" />
      {props.recipes.length > 0 && <h3>Recipes</h3>}
      {props.recipes.map(r => (
        <PaletteItem
          key={r.name}
          item={{ kind: 'recipe', label: `${r.name}: ${r.title}`, recipe: r.name }}
          detail={`${r.title} — drop a model and a dataset onto it`}
        />
      ))}
      <h3>Datasets</h3>
      {datasets.length ? datasets.map(entry) : <div className="jp-SvPipeline-help">none on the store</div>}
      <h3>Models</h3>
      {models.length ? models.map(entry) : <div className="jp-SvPipeline-help">none on the store</div>}
      {props.error && <div className="jp-Starverse-error">{props.error}</div>}
    </div>
  );
}
