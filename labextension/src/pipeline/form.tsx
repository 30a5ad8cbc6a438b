/** The side form of the selected node (cards, GPU type, nodes, backend, budget), and of the pipeline. */
import * as React from 'react';

import { BILLING_MODES } from '../tokens/costs';
import { EvalTask } from '../tokens/evals';
import { IPipelineCheck, IPipelineDoc, IPipelineIssue, IPipelineNode, ITrainParams } from '../tokens/pipeline';
import { IStoreEntry } from '../tokens/store';
import { IPaletteItem } from './graph';

type Change = Partial<IPipelineNode['params']>;

function issueFor(issues: IPipelineIssue[], field: string): IPipelineIssue | undefined {
  return issues.find(i => i.field === field);
}

function Field(props: {
  label: string;
  field: string;
  issues: IPipelineIssue[];
  children: React.ReactNode;
}): JSX.Element {
  const issue = issueFor(props.issues, props.field);
  return (
    <label className={`jp-SvPipeline-field ${issue ? `jp-mod-${issue.level}` : ''}`}>
      <span>{props.label}</span>
      {props.children}
      {issue && (
        <span className="jp-SvPipeline-fieldIssue" title={issue.hint ?? ''}>
          {issue.message}
        </span>
      )}
    </label>
  );
}

function NumberInput(props: {
  field: keyof ITrainParams;
  value: number | undefined;
  placeholder?: string;
  min?: number;
  step?: number;
  onChange: (c: Change) => void;
}): JSX.Element {
  const [text, setText] = React.useState(props.value === undefined ? '' : String(props.value));
  React.useEffect(() => {
    setText(props.value === undefined ? '' : String(props.value));
  }, [props.value]);
  return (
    <input
      type="number"
      aria-label={props.field}
      name={props.field}
      min={props.min ?? 1}
      step={props.step ?? 1}
      placeholder={props.placeholder}
      value={text}
      onChange={event => {
        setText(event.target.value);
        const value = event.target.value === '' ? undefined : Number(event.target.value);
        if (value === undefined || Number.isFinite(value)) {
          props.onChange({ [props.field]: value });
        }
      }}
    />
  );
}

function TextInput(props: {
  field: keyof ITrainParams;
  value: string | undefined;
  placeholder?: string;
  onChange: (c: Change) => void;
}): JSX.Element {
  return (
    <input
      type="text"
      aria-label={props.field}
      name={props.field}
      placeholder={props.placeholder}
      value={props.value ?? ''}
      onChange={event => props.onChange({ [props.field]: event.target.value })}
    />
  );
}

function Select(props: {
  field: string;
  value: string | undefined;
  options: ReadonlyArray<string>;
  empty?: string;
  onChange: (value: string | undefined) => void;
}): JSX.Element {
  return (
    <select
      aria-label={props.field}
      name={props.field}
      value={props.value ?? ''}
      onChange={event => props.onChange(event.target.value || undefined)}
    >
      {props.empty !== undefined && <option value="">{props.empty}</option>}
      {props.options.map(o => (
        <option key={o} value={o}>
          {o}
        </option>
      ))}
    </select>
  );
}

/** The placeholder of a degree left unset: what the step runs with, "(derived)" where the template chose it. */
function derived(value: number | undefined, byTemplate: boolean): string {
  if (value === undefined) {
    return byTemplate ? 'derived' : '1';
  }
  return byTemplate ? `${value} (derived)` : String(value);
}

/** The form of a training step. */
function TrainForm(props: {
  node: IPipelineNode;
  issues: IPipelineIssue[];
  info: IPipelineCheck['info'][string] | null;
  gpus: string[];
  recipes: string[];
  onChange: (c: Change) => void;
}): JSX.Element {
  const p = props.node.params;
  const recipe = props.node.kind === 'recipe';
  const on = props.onChange;
  const f = (label: string, field: string, child: React.ReactNode): JSX.Element => (
    <Field label={label} field={field} issues={props.issues}>
      {child}
    </Field>
  );
  return (
    <>
      {recipe && f('Recipe', 'recipe', <Select field="recipe" value={p.recipe} options={props.recipes} empty="(pick one)" onChange={v => on({ recipe: v })} />)}
      {f('Template', 'template', <Select field="template" value={p.template ?? (recipe ? undefined : 'ddp')} options={['ddp', 'fsdp', 'tp', 'pp']}
        empty={recipe ? "the recipe's" : undefined}
        // a new template derives its own split: the old template's degrees do not stay behind
        onChange={v => on({ template: v as ITrainParams['template'], tensor_parallel: undefined, pipeline_parallel: undefined })} />)}
      {!recipe && f('Script', 'script', <TextInput field="script" value={p.script} placeholder="the template's example" onChange={on} />)}
      {f('Nodes', 'nodes', <NumberInput field="nodes" value={p.nodes} placeholder="1" onChange={on} />)}
      {f('Cards per node', 'gpus_per_node', <NumberInput field="gpus_per_node" value={p.gpus_per_node} placeholder="1" onChange={on} />)}
      {f('GPU type', 'gpu', <Select field="gpu" value={p.gpu} options={props.gpus} empty="workspace default" onChange={v => on({ gpu: v })} />)}
      {f('Data parallel', 'data_parallel', <NumberInput field="data_parallel" value={p.data_parallel}
        placeholder={props.info?.data_parallel ? `${props.info.data_parallel} (derived)` : 'derived'} onChange={on} />)}
      {f('Tensor parallel', 'tensor_parallel', <NumberInput field="tensor_parallel" value={p.tensor_parallel}
        placeholder={derived(props.info?.tensor_parallel, p.template === 'tp')} onChange={on} />)}
      {f('Pipeline parallel', 'pipeline_parallel', <NumberInput field="pipeline_parallel" value={p.pipeline_parallel}
        placeholder={derived(props.info?.pipeline_parallel, p.template === 'pp')} onChange={on} />)}
      {f('Steps', 'steps', <NumberInput field="steps" value={p.steps} placeholder="the script's" onChange={on} />)}
      {f('Estimated hours', 'hours', <NumberInput field="hours" value={p.hours} min={0.01} step={0.25} placeholder="1" onChange={on} />)}
      {f('Budget', 'budget', <TextInput field="budget" value={p.budget} placeholder="no cap" onChange={on} />)}
      {f('Billing', 'billing', <Select field="billing" value={p.billing} options={BILLING_MODES} empty="on_demand" onChange={v => on({ billing: v as ITrainParams['billing'] })} />)}
      {f('Backend', 'backend', <Select field="backend" value={p.backend} options={['local', 'kubernetes', 'slurm']} empty="the pipeline's"
        onChange={v => on({ backend: v as ITrainParams['backend'] })} />)}
      {props.info && props.info.mounts.length > 0 && (
        <div className="jp-SvPipeline-paths">
          {props.info.mounts.map(ref => (
            <div key={ref}>
              <b>{ref}</b> → DATA_PATH {props.info?.paths[ref] ?? '(not pulled)'}
            </div>
          ))}
        </div>
      )}
    </>
  );
}

/** The form of a data preparation step: which step, and its options as JSON. */
function PrepForm(props: { node: IPipelineNode; issues: IPipelineIssue[]; onChange: (c: Change) => void }): JSX.Element {
  const p = props.node.params;
  const [text, setText] = React.useState(JSON.stringify(p.options ?? {}));
  const [bad, setBad] = React.useState<string | null>(null);
  return (
    <>
      <Field label="Step" field="step" issues={props.issues}>
        <Select field="step" value={p.step} options={['clean', 'dedup', 'score']}
          onChange={v => props.onChange({ step: v as ITrainParams['step'] })} />
      </Field>
      <Field label="Backend" field="backend" issues={props.issues}>
        <Select field="backend" value={p.backend} options={['local', 'kubernetes', 'slurm']} empty="the pipeline's"
          onChange={v => props.onChange({ backend: v as ITrainParams['backend'] })} />
      </Field>
      <Field label="Shards (ranks: N or NODESxPROCS; unset: one, in the workspace on local)" field="shards" issues={props.issues}>
        <input
          type="text"
          aria-label="shards"
          name="shards"
          placeholder={p.step === 'score' ? 'one rank' : 'e.g. 4 or 2x2'}
          disabled={p.step === 'score'}
          value={p.shards === undefined ? '' : String(p.shards)}
          onChange={event => {
            const text = event.target.value.trim();
            props.onChange({ shards: text === '' ? undefined : /^\d+$/.test(text) ? Number(text) : text });
          }}
        />
      </Field>
      <Field label="Options (JSON, as `starverse data STEP` takes them)" field="options" issues={props.issues}>
        <textarea
          aria-label="options"
          name="options"
          rows={4}
          value={text}
          placeholder='{"actions": {"email": "mask"}}'
          onChange={event => {
            setText(event.target.value);
            try {
              const value = JSON.parse(event.target.value || '{}') as unknown;
              if (typeof value !== 'object' || value === null || Array.isArray(value)) {
                throw new Error('options are a JSON object');
              }
              setBad(null);
              props.onChange({ options: value as Record<string, unknown> });
            } catch (reason) {
              setBad(String(reason));
            }
          }}
        />
        {bad && <span className="jp-SvPipeline-fieldIssue">{bad}</span>}
      </Field>
    </>
  );
}

/** Task kinds of `starverse eval` (`evals.TASKS`). */
const EVAL_TASKS: EvalTask[] = ['classification', 'extraction', 'qa', 'generation', 'perplexity'];

/**
 * The form of an evaluation step: the model and the labelled dataset it is fed (picking one here
 * wires its catalog node into the step, in place of the one fed before), the task and its fields.
 */
function EvalForm(props: {
  doc: IPipelineDoc;
  node: IPipelineNode;
  issues: IPipelineIssue[];
  entries: IStoreEntry[];
  onChange: (c: Change) => void;
  onFeed: (item: IPaletteItem) => void;
}): JSX.Element {
  const p = props.node.params;
  const on = props.onChange;
  const fed = props.doc.edges
    .filter(e => e.target === props.node.id)
    .map(e => props.doc.nodes.find(n => n.id === e.source))
    .filter((n): n is IPipelineNode => n !== undefined);
  const trainer = fed.find(n => n.kind === 'train' || n.kind === 'recipe');
  const model = fed.find(n => n.kind === 'model')?.params.ref;
  const data = fed.find(n => n.kind === 'dataset')?.params.ref;
  const refs = (kinds: string[]): string[] => props.entries.filter(e => kinds.includes(e.kind)).map(e => e.ref);
  const f = (label: string, field: string, child: React.ReactNode): JSX.Element => (
    <Field label={label} field={field} issues={props.issues}>
      {child}
    </Field>
  );
  return (
    <>
      {f('Model', 'model', <Select field="model" value={model} options={refs(['model'])}
        empty={trainer ? `output of ${trainer.id}` : '(pick one, or draw a training step in)'}
        onChange={v => props.onFeed({ kind: 'model', label: v ?? '', ref: v })} />)}
      {f('Labelled dataset', 'data', <Select field="data" value={data} options={refs(['dataset', 'hf-dataset'])}
        empty="(pick one)" onChange={v => props.onFeed({ kind: 'dataset', label: v ?? '', ref: v })} />)}
      {f('Task', 'task', <Select field="task" value={p.task ?? 'classification'} options={EVAL_TASKS}
        onChange={v => on({ task: v as EvalTask | undefined })} />)}
      {f('Input field', 'input_field', <TextInput field="input_field" value={p.input_field} placeholder="input" onChange={on} />)}
      {f('Target field', 'target_field', <TextInput field="target_field" value={p.target_field} placeholder="target" onChange={on} />)}
      {f('Only the first N examples', 'limit', <NumberInput field="limit" value={p.limit} placeholder="every example" onChange={on} />)}
      {f('Backend', 'backend', <Select field="backend" value={p.backend} options={['local', 'kubernetes', 'slurm']} empty="the pipeline's"
        onChange={v => on({ backend: v as ITrainParams['backend'] })} />)}
      <p className="jp-SvPipeline-help">
        Baselines: score them with `starverse eval MODEL --data D --baseline M2`, or add an eval step per model
        and compare the chain with `starverse eval compare`.
      </p>
    </>
  );
}

/** The side form: the selected node's, or the pipeline's own when nothing is selected. */
export function SideForm(props: {
  doc: IPipelineDoc;
  selected: IPipelineNode | null;
  issues: IPipelineIssue[];
  check: IPipelineCheck | null;
  gpus: string[];
  recipes: string[];
  entries: IStoreEntry[];
  onNode: (id: string, change: Change) => void;
  /** an eval step's model or dataset picked in its form: wire that catalog entry into the step */
  onFeed: (id: string, item: IPaletteItem) => void;
  onDoc: (change: Partial<Pick<IPipelineDoc, 'name' | 'backend'>>) => void;
  onDelete: (id: string) => void;
}): JSX.Element {
  const { selected } = props;
  if (!selected) {
    return (
      <div className="jp-SvPipeline-form" data-form="pipeline">
        <h3>Pipeline</h3>
        <label className="jp-SvPipeline-field">
          <span>Name</span>
          <input aria-label="pipeline name" value={props.doc.name} onChange={e => props.onDoc({ name: e.target.value })} />
        </label>
        <label className="jp-SvPipeline-field">
          <span>Backend</span>
          <Select field="pipeline backend" value={props.doc.backend} options={['local', 'kubernetes', 'slurm']}
            onChange={v => props.onDoc({ backend: (v ?? 'local') as IPipelineDoc['backend'] })} />
        </label>
        <p className="jp-SvPipeline-help">
          Drag a training step from the palette, then drop a dataset onto it. Select a node to edit it.
        </p>
      </div>
    );
  }
  const issues = props.issues.filter(i => i.node === selected.id);
  const change = (c: Change): void => props.onNode(selected.id, c);
  const nodeKind = (kind: IStoreEntry['kind']): string => (kind === 'hf-dataset' ? 'dataset' : kind);
  const refs = props.entries.filter(e => nodeKind(e.kind) === selected.kind).map(e => e.ref);
  return (
    <div className="jp-SvPipeline-form" data-form={selected.id}>
      <h3>
        {selected.id} <span className="jp-SvPipeline-tag">{selected.kind}</span>
      </h3>
      {selected.kind === 'eval' ? (
        <EvalForm doc={props.doc} node={selected} issues={issues} entries={props.entries} onChange={change}
          onFeed={item => props.onFeed(selected.id, item)} />
      ) : selected.kind === 'prep' ? (
        <PrepForm node={selected} issues={issues} onChange={change} />
      ) : selected.kind === 'train' || selected.kind === 'recipe' ? (
        <TrainForm node={selected} issues={issues} info={props.check?.info[selected.id] ?? null} gpus={props.gpus}
          recipes={props.recipes} onChange={change} />
      ) : (
        <Field label="Catalog entry" field="ref" issues={issues}>
          <Select field="ref" value={selected.params.ref} options={refs} empty="(pick one)" onChange={v => change({ ref: v })} />
        </Field>
      )}
      {issues
        .filter(i => !i.field || !['template', 'script', 'nodes', 'gpus_per_node', 'gpu', 'data_parallel',
          'tensor_parallel', 'pipeline_parallel', 'steps', 'hours', 'budget', 'billing', 'backend', 'ref',
          'recipe', 'step', 'options', 'shards', 'task', 'input_field', 'target_field', 'limit',
          ...(selected.kind === 'eval' ? ['model', 'data'] : [])].includes(i.field))
        .map((i, n) => (
          <div key={n} className={`jp-SvPipeline-issue jp-mod-${i.level}`} title={i.hint ?? ''}>
            {i.message}
          </div>
        ))}
      <button className="jp-SvPipeline-delete" onClick={() => props.onDelete(selected.id)}>
        Remove node
      </button>
    </div>
  );
}
