/** The boxes of the canvas: a training step and a catalog entry, each with its issues and run state. */
import { Handle, Node, NodeProps, Position } from '@xyflow/react';
import * as React from 'react';

import { IPipelineCheck, IPipelineIssue, IPipelineNode, IStepRun } from '../tokens/pipeline';
import { cardsOf } from './graph';

/** What the canvas hands every node. */
export type FlowData = {
  node: IPipelineNode;
  issues: IPipelineIssue[];
  info: IPipelineCheck['info'][string] | null;
  cost: string | null;
  run: IStepRun | null;
  onOpenJob: (run: IStepRun) => void;
};

export type StepNode = Node<FlowData, 'train' | 'recipe'>;
export type EntryNode = Node<FlowData, 'entry'>;
export type PrepNode = Node<FlowData, 'prep'>;
export type EvalNode = Node<FlowData, 'eval'>;

function Issues(props: { issues: IPipelineIssue[] }): JSX.Element | null {
  if (props.issues.length === 0) {
    return null;
  }
  return (
    <ul className="jp-SvPipeline-issues">
      {props.issues.map((issue, i) => (
        <li
          key={i}
          className={`jp-SvPipeline-issue jp-mod-${issue.level}`}
          title={issue.hint ?? ''}
          data-field={issue.field ?? ''}
        >
          {issue.message}
        </li>
      ))}
    </ul>
  );
}

function RunBadge(props: { run: IStepRun | null; onOpen: (run: IStepRun) => void }): JSX.Element | null {
  const { run } = props;
  if (!run) {
    return null;
  }
  const open = run.job_id !== null;
  return (
    <button
      className={`jp-SvPipeline-run jp-mod-${run.state}`}
      disabled={!open}
      title={open ? `open ${run.job_id}: monitor and logs` : (run.reason ?? run.state)}
      onClick={event => {
        event.stopPropagation();
        props.onOpen(run);
      }}
    >
      {run.state}
    </button>
  );
}

/** A step's estimated cost (or why it has none); nothing before the first check. */
function CostLine(props: { cost: string | null }): JSX.Element | null {
  if (props.cost === null) {
    return null;
  }
  return (
    <div className="jp-SvPipeline-nodeLine jp-SvPipeline-cost" data-role="cost">
      {props.cost}
    </div>
  );
}

/** What a step's run said once it succeeded (e.g. the report it wrote); nothing before. */
function RunReason(props: { run: IStepRun | null; role?: string }): JSX.Element | null {
  const { run } = props;
  if (!run?.reason || run.state !== 'succeeded') {
    return null;
  }
  return (
    <div className="jp-SvPipeline-nodeLine" data-role={props.role} title={run.reason}>
      {run.reason}
    </div>
  );
}

function stateClass(data: FlowData): string {
  const errors = data.issues.some(i => i.level === 'error');
  const warnings = data.issues.some(i => i.level === 'warning');
  return errors ? 'jp-mod-error' : warnings ? 'jp-mod-warning' : 'jp-mod-ok';
}

/** The frame of a step: its box (kind, state, id for drops), handles and title with its tag. */
function StepBox(props: { data: FlowData; tag: string; children: React.ReactNode }): JSX.Element {
  const { data } = props;
  return (
    <div
      className={`jp-SvPipeline-node jp-SvPipeline-step jp-SvPipeline-${data.node.kind} ${stateClass(data)}`}
      data-node-id={data.node.id}
    >
      <Handle type="target" position={Position.Left} />
      <div className="jp-SvPipeline-nodeTitle">
        <span>{data.node.id}</span>
        <span className="jp-SvPipeline-tag">{props.tag}</span>
      </div>
      {props.children}
      <Handle type="source" position={Position.Right} />
    </div>
  );
}

/** A training step: template, cards and parallel sizes, data it mounts, cost, issues, run state. */
export function TrainNodeView(props: NodeProps<StepNode>): JSX.Element {
  const { data } = props;
  const p = data.node.params;
  const tp = p.tensor_parallel ?? 1;
  const pp = p.pipeline_parallel ?? 1;
  const cards = cardsOf(p);
  const dp = p.data_parallel ?? (cards % (tp * pp) === 0 ? cards / (tp * pp) : null);
  const mounts = data.info?.mounts ?? [];
  const tag = data.node.kind === 'recipe' ? `recipe ${p.recipe ?? '?'}` : (p.template ?? 'ddp').toUpperCase();
  return (
    <StepBox data={data} tag={tag}>
      <div className="jp-SvPipeline-nodeLine" data-role="topology">
        {p.nodes ?? 1} node(s) x {p.gpus_per_node ?? 1} {p.gpu ?? 'default'} = {cards} card(s)
      </div>
      <div className="jp-SvPipeline-nodeLine" data-role="parallel">
        dp {dp ?? '?'} x tp {tp} x pp {pp}
      </div>
      {mounts.map(ref => (
        <div key={ref} className="jp-SvPipeline-nodeLine jp-SvPipeline-mount" title={data.info?.paths[ref] ?? ''}>
          data: {data.info?.produced_by?.[ref] ? `output of ${data.info.produced_by[ref]}` : ref}
        </div>
      ))}
      <CostLine cost={data.cost} />
      <Issues issues={data.issues} />
      <RunBadge run={data.run} onOpen={data.onOpenJob} />
    </StepBox>
  );
}

/** A dataset or model from the catalog: what it is and where it lies on the store. */
export function EntryNodeView(props: NodeProps<EntryNode>): JSX.Element {
  const { data } = props;
  // the exact version a bare name was pinned to (what the steps read), and what the name means now
  const ref = data.node.params.ref ?? '';
  const pin = data.node.params.pinned;
  const pinned = data.info?.pinned ?? (pin && !ref.includes('@') && pin.startsWith(`${ref}@`) ? pin : null);
  const latest = data.info?.latest ?? null;
  return (
    <div
      className={`jp-SvPipeline-node jp-SvPipeline-entry jp-SvPipeline-${data.node.kind} ${stateClass(data)}`}
      data-node-id={data.node.id}
    >
      <div className="jp-SvPipeline-nodeTitle">
        <span>{data.node.id}</span>
        <span className="jp-SvPipeline-tag">{data.node.kind}</span>
      </div>
      <div className="jp-SvPipeline-nodeLine">{data.node.params.ref ?? '(pick an entry)'}</div>
      {pinned && (
        <div
          className="jp-SvPipeline-nodeLine jp-SvPipeline-pinned"
          title={`the steps read ${pinned}${latest && latest !== pinned ? `; ${ref} now means ${latest}` : ''}`}
        >
          pinned {pinned}
          {latest && latest !== pinned ? ` · newer: ${latest}` : ''}
        </div>
      )}
      <Issues issues={data.issues} />
      <Handle type="source" position={Position.Right} />
    </div>
  );
}

/** A data preparation step: it runs in the workspace and writes a new dataset version. */
export function PrepNodeView(props: NodeProps<PrepNode>): JSX.Element {
  const { data } = props;
  const seconds = data.info?.seconds;
  return (
    <StepBox data={data} tag={`prep ${data.node.params.step ?? '?'}`}>
      <div className="jp-SvPipeline-nodeLine">
        {data.info?.source ? `reads ${data.info.source}` : 'drop a dataset onto it'}
      </div>
      <div className="jp-SvPipeline-nodeLine">
        runs in the workspace{typeof seconds === 'number' ? `, about ${Math.max(1, Math.round(seconds))} s` : ''}
      </div>
      <Issues issues={data.issues} />
      <RunBadge run={data.run} onOpen={data.onOpenJob} />
      <RunReason run={data.run} />
    </StepBox>
  );
}

/** What the check says of an eval step (`EvalPlan.to_json()`): the model it scores, on which dataset. */
type EvalInfo = { model?: string; data?: string; from_node?: string | null; data_from?: string | null };

/** An evaluation step: the model it scores (a store model or the training step before it) on a labelled set. */
export function EvalNodeView(props: NodeProps<EvalNode>): JSX.Element {
  const { data } = props;
  const p = data.node.params;
  const ev = (data.info ?? {}) as EvalInfo;
  const model = ev.from_node ? `output of ${ev.from_node}` : ev.model;
  const dataset = ev.data_from ? `output of ${ev.data_from}` : ev.data;
  return (
    <StepBox data={data} tag={`eval ${p.task ?? 'classification'}`}>
      <div className="jp-SvPipeline-nodeLine" data-role="scores">
        {model ? `scores ${model}` : 'draw a model or a training step into it'}
      </div>
      <div className="jp-SvPipeline-nodeLine" data-role="on">
        {dataset ? `on ${dataset}` : 'drop a labelled dataset onto it'}
        {p.limit ? ` (first ${p.limit})` : ''}
      </div>
      <CostLine cost={data.cost} />
      <Issues issues={data.issues} />
      <RunBadge run={data.run} onOpen={data.onOpenJob} />
      <RunReason run={data.run} role="report" />
    </StepBox>
  );
}

export const NODE_TYPES = {
  train: TrainNodeView,
  recipe: TrainNodeView,
  prep: PrepNodeView,
  eval: EvalNodeView,
  entry: EntryNodeView
};
