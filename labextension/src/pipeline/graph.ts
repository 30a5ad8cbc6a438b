/**
 * Pure edits of a `.svpipeline` document: what the canvas does to it, without React.
 * The document is the truth; the canvas is drawn from it after every edit.
 */
import { IPipelineCheck, IPipelineDoc, IPipelineNode, ITrainParams, PipelineNodeKind } from '../tokens/pipeline';

/** What a palette item carries through a drag. */
export interface IPaletteItem {
  kind: PipelineNodeKind;
  label: string;
  ref?: string;
  template?: ITrainParams['template'];
  recipe?: string;
  step?: ITrainParams['step'];
}

/** Node kinds that run: jobs, data preparation, and evaluation. */
export function isStep(kind: PipelineNodeKind): boolean {
  return kind === 'train' || kind === 'recipe' || kind === 'prep' || kind === 'eval';
}

/** The drag data type of palette items. */
export const DRAG_TYPE = 'application/x-starverse-pipeline-node';

/** A new, empty pipeline called `name`. */
export function emptyPipeline(name: string): IPipelineDoc {
  return { version: 1, name, backend: 'local', nodes: [], edges: [] };
}

/** Parse a file's text; an empty file is an empty pipeline. Throws on JSON that is not one. */
export function parsePipeline(text: string, fallbackName: string): IPipelineDoc {
  if (!text.trim()) {
    return emptyPipeline(fallbackName);
  }
  const data = JSON.parse(text) as Partial<IPipelineDoc>;
  if (typeof data !== 'object' || data === null || Array.isArray(data)) {
    throw new Error('a .svpipeline file holds a JSON object');
  }
  return {
    version: 1,
    name: typeof data.name === 'string' ? data.name : fallbackName,
    backend: data.backend ?? 'local',
    nodes: Array.isArray(data.nodes) ? data.nodes : [],
    edges: Array.isArray(data.edges) ? data.edges : []
  };
}

function sortKeys(value: unknown): unknown {
  if (Array.isArray(value)) {
    return value.map(sortKeys);
  }
  if (typeof value === 'object' && value !== null) {
    const out: Record<string, unknown> = {};
    for (const key of Object.keys(value).sort()) {
      out[key] = sortKeys((value as Record<string, unknown>)[key]);
    }
    return out;
  }
  return value;
}

/** The file's text: sorted keys, two-space indents, a trailing newline (as the Python side writes it). */
export function serializePipeline(doc: IPipelineDoc): string {
  return JSON.stringify(sortKeys(doc), null, 2) + '\n';
}

/** A node id not used yet: `train`, `train-2`, ... */
export function freshId(doc: IPipelineDoc, base: string): string {
  const clean = base.replace(/[^A-Za-z0-9_-]+/g, '-').replace(/^-+|-+$/g, '') || 'node';
  const used = new Set(doc.nodes.map(n => n.id));
  if (!used.has(clean)) {
    return clean;
  }
  for (let i = 2; ; i++) {
    if (!used.has(`${clean}-${i}`)) {
      return `${clean}-${i}`;
    }
  }
}

/** The node a palette item becomes at `position`. */
export function nodeFor(
  doc: IPipelineDoc,
  item: IPaletteItem,
  position: { x: number; y: number }
): IPipelineNode {
  const rounded = { x: Math.round(position.x), y: Math.round(position.y) };
  if (item.kind === 'train') {
    const template = item.template ?? 'ddp';
    const params: ITrainParams = { template, nodes: 1, gpus_per_node: 1, hours: 1 };
    if (template === 'tp' || template === 'pp') {
      // two cards to split; the split itself is derived from the cards (the check serves it),
      // so it follows a changed card count instead of staying at 2
      params.gpus_per_node = 2;
    }
    return { id: freshId(doc, 'train'), kind: 'train', params, position: rounded };
  }
  if (item.kind === 'prep') {
    return { id: freshId(doc, item.step ?? 'prep'), kind: 'prep', params: { step: item.step }, position: rounded };
  }
  if (item.kind === 'eval') {
    // a model (or the training step before it) and one labelled dataset are drawn into it
    return { id: freshId(doc, 'eval'), kind: 'eval', params: { task: 'classification' }, position: rounded };
  }
  if (item.kind === 'recipe') {
    const params: ITrainParams = { recipe: item.recipe, nodes: 1, gpus_per_node: 1, hours: 1 };
    return { id: freshId(doc, item.recipe ?? 'recipe'), kind: 'recipe', params, position: rounded };
  }
  const base = (item.ref ?? item.kind).split('@')[0].split('/').pop() ?? item.kind;
  return { id: freshId(doc, base), kind: item.kind, params: { ref: item.ref }, position: rounded };
}

/** `doc` with `node` added. */
export function addNode(doc: IPipelineDoc, node: IPipelineNode): IPipelineDoc {
  return { ...doc, nodes: [...doc.nodes, node] };
}

/** `doc` with an edge `source -> target`, unless it is there, loops, or feeds a non-step. */
export function connect(doc: IPipelineDoc, source: string, target: string): IPipelineDoc {
  const to = doc.nodes.find(n => n.id === target);
  if (!to || !isStep(to.kind) || source === target) {
    return doc;
  }
  if (doc.edges.some(e => e.source === source && e.target === target)) {
    return doc;
  }
  return { ...doc, edges: [...doc.edges, { source, target }] };
}

/**
 * Drop a catalog entry onto a training step: the entry becomes a node left of the step,
 * wired into it, so the step mounts it (and gets `DATA_PATH` / `MODEL_PATH`).
 * An entry already on the canvas is wired instead of added twice.
 */
export function dropEntryOnStep(
  doc: IPipelineDoc,
  item: IPaletteItem,
  stepId: string
): { doc: IPipelineDoc; nodeId: string } {
  const step = doc.nodes.find(n => n.id === stepId);
  if (!step) {
    throw new Error(`no step ${stepId}`);
  }
  const existing = doc.nodes.find(n => n.kind === item.kind && n.params.ref === item.ref);
  if (existing) {
    return { doc: connect(doc, existing.id, stepId), nodeId: existing.id };
  }
  const feeding = doc.edges.filter(e => e.target === stepId).length;
  const node = nodeFor(doc, item, {
    x: step.position.x - 280,
    y: step.position.y + feeding * 110
  });
  return { doc: connect(addNode(doc, node), node.id, stepId), nodeId: node.id };
}

/** `doc` with node `id`'s params changed (a value of `undefined` or '' removes the key). */
export function setParams(
  doc: IPipelineDoc,
  id: string,
  changes: Partial<IPipelineNode['params']>
): IPipelineDoc {
  return {
    ...doc,
    nodes: doc.nodes.map(n => {
      if (n.id !== id) {
        return n;
      }
      const params: Record<string, unknown> = { ...n.params };
      for (const [key, value] of Object.entries(changes)) {
        if (value === undefined || value === '' || Number.isNaN(value)) {
          delete params[key];
        } else {
          params[key] = value;
        }
      }
      return { ...n, params: params as IPipelineNode['params'] };
    })
  };
}

/** `doc` with node positions moved. */
export function moveNodes(
  doc: IPipelineDoc,
  moves: Record<string, { x: number; y: number }>
): IPipelineDoc {
  return {
    ...doc,
    nodes: doc.nodes.map(n =>
      moves[n.id]
        ? { ...n, position: { x: Math.round(moves[n.id].x), y: Math.round(moves[n.id].y) } }
        : n
    )
  };
}

/** `doc` without the nodes `ids` and their edges. */
export function removeNodes(doc: IPipelineDoc, ids: string[]): IPipelineDoc {
  const gone = new Set(ids);
  return {
    ...doc,
    nodes: doc.nodes.filter(n => !gone.has(n.id)),
    edges: doc.edges.filter(e => !gone.has(e.source) && !gone.has(e.target))
  };
}

/** `doc` without the edges listed. */
export function removeEdges(
  doc: IPipelineDoc,
  edges: { source: string; target: string }[]
): IPipelineDoc {
  const gone = new Set(edges.map(e => `${e.source}\u0000${e.target}`));
  return { ...doc, edges: doc.edges.filter(e => !gone.has(`${e.source}\u0000${e.target}`)) };
}

/** Cards of a train node: nodes x GPUs per node. */
export function cardsOf(params: ITrainParams): number {
  return (params.nodes ?? 1) * (params.gpus_per_node ?? 1);
}

/**
 * The document with every bare dataset / model name pinned to the version the check says it means
 * now (`info.latest`), or null when nothing is left to pin: a pipeline reads one version until the
 * user picks another (the pin is kept in the file when it is saved; the check warns, naming the
 * newer version, when the name moves on).
 */
export function pinEntries(doc: IPipelineDoc, check: IPipelineCheck): IPipelineDoc | null {
  let out: IPipelineDoc | null = null;
  for (const node of doc.nodes) {
    const info = check.info[node.id];
    const ref = node.params.ref ?? '';
    if (!info || !info.latest || info.pinned || !ref || ref.includes('@') || info.ref !== ref) {
      continue;
    }
    out = setParams(out ?? doc, node.id, { pinned: info.latest });
  }
  return out;
}
