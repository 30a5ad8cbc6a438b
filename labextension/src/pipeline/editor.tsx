/**
 * The pipeline editor: palette (catalog entries and steps), canvas (@xyflow/react), side form,
 * and a bar with the live check, the whole pipeline's cost, export and run.
 */
import {
  applyNodeChanges,
  Background,
  Connection,
  Controls,
  Edge,
  Node,
  NodeChange,
  ReactFlow,
  ReactFlowProvider,
  useReactFlow
} from '@xyflow/react';
import '@xyflow/react/dist/style.css';
import * as React from 'react';

import { errorText } from '../format';
import { usePoll } from '../poll';
import { requestAPI, sendJSON } from '../request';
import { IPriceTable } from '../tokens/costs';
import { IPipelineCheck, IPipelineDoc, IPipelineExport, IPipelineRun, IStepRun } from '../tokens/pipeline';
import { IStoreEntry } from '../tokens/store';
import { SideForm } from './form';
import {
  addNode,
  connect,
  DRAG_TYPE,
  dropEntryOnStep,
  IPaletteItem,
  isStep,
  moveNodes,
  nodeFor,
  pinEntries,
  removeEdges,
  removeNodes,
  setParams
} from './graph';
import { FlowData, NODE_TYPES } from './nodes';

/** What the editor needs from the document widget around it. */
export interface IPipelineHost {
  /** The document's path relative to the server root (relative script paths are read beside it). */
  path: () => string;
  /** Open a step's job (monitor and logs). */
  openJob: (run: IStepRun) => void;
  /** Open an exported file in the editor. */
  openPath: (path: string) => void;
}

/** What the palette shows of a recipe (`GET recipes`: `Recipe.to_json()`). */
interface IRecipeItem {
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
function Palette(props: {
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

function toFlowNodes(
  doc: IPipelineDoc,
  check: IPipelineCheck | null,
  run: IPipelineRun | null,
  prev: Node<FlowData>[],
  onOpenJob: (run: IStepRun) => void
): Node<FlowData>[] {
  const before = new Map(prev.map(n => [n.id, n]));
  return doc.nodes.map(node => {
    const old = before.get(node.id);
    const cost = check?.costs.find(c => c.node === node.id);
    const figure = cost?.preview?.estimate
      ? `${cost.preview.estimate.amount} ${cost.preview.estimate.currency} for ${cost.preview.estimate.seconds / 3600} h`
      : (cost?.reason ?? null);
    return {
      id: node.id,
      type: isStep(node.kind) ? node.kind : 'entry',
      position: old?.dragging ? old.position : node.position,
      selected: old?.selected,
      measured: old?.measured,
      data: {
        node,
        issues: check?.issues.filter(i => i.node === node.id) ?? [],
        info: check?.info[node.id] ?? null,
        cost: figure,
        run: run?.steps.find(s => s.node === node.id) ?? null,
        onOpenJob
      }
    };
  });
}

function Editor(props: {
  doc: IPipelineDoc;
  onDoc: (doc: IPipelineDoc) => void;
  host: IPipelineHost;
}): JSX.Element {
  const { doc, onDoc, host } = props;
  const flow = useReactFlow();
  const [nodes, setNodes] = React.useState<Node<FlowData>[]>([]);
  const [selected, setSelected] = React.useState<string | null>(null);
  const [check, setCheck] = React.useState<IPipelineCheck | null>(null);
  const [checkError, setCheckError] = React.useState<string | null>(null);
  const [entries, setEntries] = React.useState<IStoreEntry[]>([]);
  const [entriesError, setEntriesError] = React.useState<string | null>(null);
  const [gpus, setGpus] = React.useState<string[]>([]);
  const [recipes, setRecipes] = React.useState<IRecipeItem[]>([]);
  const [prep, setPrep] = React.useState(false);
  const [run, setRun] = React.useState<IPipelineRun | null>(null);
  const [message, setMessage] = React.useState<string | null>(null);
  const [busy, setBusy] = React.useState(false);

  // -- the catalog and the GPU types feed the palette and the form
  usePoll('jupyter-starverse:pipeline-store', 10 * 1000, async () => {
    try {
      setEntries(await requestAPI<IStoreEntry[]>(['store']));
      setEntriesError(null);
    } catch (reason) {
      setEntriesError(errorText(reason));
      throw reason;
    }
  });
  React.useEffect(() => {
    requestAPI<IPriceTable>(['cost', 'prices'])
      .then(t => setGpus([...Object.keys(t.gpus), 'cpu']))
      .catch(() => setGpus(['cpu']));
    // recipes join the palette when the server has the recipes service
    requestAPI<IRecipeItem[]>(['recipes'])
      .then(list => setRecipes(list.map(r => ({ name: r.name, title: r.title }))))
      .catch(() => setRecipes([]));
    // data preparation joins the palette when the server has the data service
    requestAPI<unknown[]>(['data', 'reports'])
      .then(() => setPrep(true))
      .catch(() => setPrep(false));
  }, []);

  // -- the live check (issues per node, cost) after every edit, debounced
  React.useEffect(() => {
    let current = true;
    const timer = window.setTimeout(() => {
      sendJSON<IPipelineCheck>(['pipelines', 'validate'], 'POST', { pipeline: doc, path: host.path() })
        .then(result => {
          if (current) {
            setCheck(result);
            setCheckError(null);
            // a bare dataset / model name is pinned to its exact version at its first check
            // (an edit like any other: the document is dirty, saving keeps the pin)
            const pinned = pinEntries(doc, result);
            if (pinned !== null) {
              onDoc(pinned);
            }
          }
        })
        .catch(reason => {
          if (current) {
            setCheck(null);
            setCheckError(errorText(reason));
          }
        });
    }, 350);
    return () => {
      current = false;
      window.clearTimeout(timer);
    };
  }, [doc]);

  // -- the run's nodes, live while it runs
  const running = run !== null && run.state === 'running';
  usePoll(`jupyter-starverse:pipeline-run:${run?.run_id ?? 'none'}`, running ? 1000 : 60 * 1000, async () => {
    if (run && running) {
      setRun(await requestAPI<IPipelineRun>(['pipelines', 'runs', run.run_id]));
    }
  });

  const openJob = React.useCallback((step: IStepRun) => host.openJob(step), [host]);
  React.useEffect(() => {
    setNodes(prev => toFlowNodes(doc, check, run, prev, openJob));
  }, [doc, check, run, openJob]);

  const edges: Edge[] = doc.edges.map(e => {
    const source = run?.steps.find(s => s.node === e.source);
    return {
      id: `${e.source}->${e.target}`,
      source: e.source,
      target: e.target,
      animated: source?.state === 'running' || source?.state === 'pending'
    };
  });

  const onNodesChange = (changes: NodeChange<Node<FlowData>>[]): void => {
    const kept = changes.filter(c => c.type !== 'remove');
    setNodes(prev => applyNodeChanges(kept, prev));
    const removed = changes.filter(c => c.type === 'remove').map(c => (c.type === 'remove' ? c.id : ''));
    if (removed.length) {
      onDoc(removeNodes(doc, removed));
    }
  };

  const onDrop = (event: React.DragEvent): void => {
    event.preventDefault();
    const raw = event.dataTransfer.getData(DRAG_TYPE);
    if (!raw) {
      return;
    }
    const item = JSON.parse(raw) as IPaletteItem;
    const target = (event.target as HTMLElement).closest('.jp-SvPipeline-step');
    const stepId = target?.getAttribute('data-node-id');
    if (!isStep(item.kind) && stepId) {
      const dropped = dropEntryOnStep(doc, item, stepId);
      onDoc(dropped.doc);
      setSelected(stepId);
      return;
    }
    const position = flow.screenToFlowPosition({ x: event.clientX, y: event.clientY });
    const node = nodeFor(doc, item, position);
    onDoc(addNode(doc, node));
    setSelected(node.id);
  };

  const doExport = async (format: IPipelineExport['format']): Promise<void> => {
    setBusy(true);
    try {
      const out = await sendJSON<IPipelineExport>(['pipelines', 'export'], 'POST', {
        pipeline: doc,
        path: host.path(),
        format,
        write: true
      });
      setMessage(`exported ${out.written.join(', ')}`);
      if (out.written.length) {
        host.openPath(out.written[0]);
      }
    } catch (reason) {
      setMessage(errorText(reason));
    } finally {
      setBusy(false);
    }
  };

  const doRun = async (): Promise<void> => {
    setBusy(true);
    try {
      setRun(await sendJSON<IPipelineRun>(['pipelines', 'run'], 'POST', { pipeline: doc, path: host.path() }));
      setMessage(null);
    } catch (reason) {
      setMessage(errorText(reason));
    } finally {
      setBusy(false);
    }
  };

  const doCancel = async (): Promise<void> => {
    if (run) {
      try {
        setRun(await sendJSON<IPipelineRun>(['pipelines', 'runs', run.run_id, 'cancel'], 'POST'));
      } catch (reason) {
        setMessage(errorText(reason));
      }
    }
  };

  // a new pipeline is empty, not wrong: it says what to do first instead of "1 error(s)"
  const empty = doc.nodes.length === 0;
  const errors = empty ? 0 : (check?.issues.filter(i => i.level === 'error').length ?? 0);
  const pipelineIssues = empty ? [] : (check?.issues.filter(i => i.node === null) ?? []);
  const selectedNode = doc.nodes.find(n => n.id === selected) ?? null;
  return (
    <div className="jp-SvPipeline-editor">
      <div className="jp-SvPipeline-bar">
        <span className="jp-SvPipeline-name">{doc.name}</span>
        <span
          className={`jp-SvPipeline-status ${errors || checkError ? 'jp-mod-error' : empty ? 'jp-mod-empty' : 'jp-mod-ok'}`}
          data-role="status"
        >
          {checkError ??
            (empty
              ? 'empty: drag a training step from the palette'
              : check === null
                ? 'checking…'
                : errors
                  ? `${errors} error(s)`
                  : 'ready to run')}
        </span>
        <span className="jp-SvPipeline-total" data-role="total-cost" title="estimated cost of every step">
          {check ? `estimated ${check.total}` : ''}
        </span>
        <span className="jp-SvPipeline-spacer" />
        <button disabled={busy || empty || errors > 0 || !check} onClick={() => void doExport('sbatch')}>Export sbatch</button>
        <button disabled={busy || empty || errors > 0 || !check} onClick={() => void doExport('yaml')}>Export YAML</button>
        <button disabled={busy || empty || errors > 0 || !check} onClick={() => void doExport('python')}>Export Python</button>
        {running ? (
          <button className="jp-mod-warn" onClick={() => void doCancel()}>Cancel run</button>
        ) : (
          <button className="jp-mod-accept" disabled={busy || empty || errors > 0 || !check} onClick={() => void doRun()}>
            Run
          </button>
        )}
        {run && (
          <span className={`jp-SvPipeline-run jp-mod-${run.state}`} data-role="run-state" title={run.run_id}>
            run {run.state}
          </span>
        )}
      </div>
      {message && <div className="jp-SvPipeline-message">{message}</div>}
      {pipelineIssues.map((i, n) => (
        <div key={n} className={`jp-SvPipeline-message jp-mod-${i.level}`}>
          {i.message}
        </div>
      ))}
      <div className="jp-SvPipeline-body">
        <Palette entries={entries} recipes={recipes} prep={prep} error={entriesError} />
        <div
          className="jp-SvPipeline-canvas"
          tabIndex={0}
          onDragOver={event => {
            event.preventDefault();
            event.dataTransfer.dropEffect = 'copy';
          }}
          onDrop={onDrop}
        >
          <ReactFlow<Node<FlowData>, Edge>
            nodes={nodes}
            edges={edges}
            nodeTypes={NODE_TYPES}
            onNodesChange={onNodesChange}
            onEdgesDelete={gone => onDoc(removeEdges(doc, gone))}
            onConnect={(c: Connection) => onDoc(connect(doc, c.source, c.target))}
            onNodeDragStop={(_event, _node, moved) =>
              onDoc(moveNodes(doc, Object.fromEntries(moved.map(n => [n.id, n.position]))))
            }
            onSelectionChange={({ nodes: chosen }) => setSelected(chosen.length ? chosen[0].id : null)}
            fitView
            fitViewOptions={{ maxZoom: 1 }}
            proOptions={{ hideAttribution: true }}
          >
            <Background />
            <Controls />
          </ReactFlow>
        </div>
        <SideForm
          doc={doc}
          selected={selectedNode}
          issues={check?.issues ?? []}
          check={check}
          gpus={gpus}
          recipes={recipes.map(r => r.name)}
          entries={entries}
          onNode={(id, change) => onDoc(setParams(doc, id, change))}
          onFeed={(id, item) => {
            // one model and one dataset feed an eval step: the pick replaces the entry of its kind fed before
            const stale = doc.edges.filter(
              e => e.target === id && doc.nodes.find(n => n.id === e.source)?.kind === item.kind
            );
            const base = removeEdges(doc, stale);
            onDoc(item.ref ? dropEntryOnStep(base, item, id).doc : base);
          }}
          onDoc={change => onDoc({ ...doc, ...change })}
          onDelete={id => {
            onDoc(removeNodes(doc, [id]));
            setSelected(null);
          }}
        />
      </div>
    </div>
  );
}

/** The editor with its own React Flow store. */
export function PipelineEditor(props: {
  doc: IPipelineDoc;
  onDoc: (doc: IPipelineDoc) => void;
  host: IPipelineHost;
}): JSX.Element {
  return (
    <ReactFlowProvider>
      <Editor {...props} />
    </ReactFlowProvider>
  );
}
