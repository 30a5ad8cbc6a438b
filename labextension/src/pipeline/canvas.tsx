/**
 * The pipeline editor's canvas (@xyflow/react): it draws the document's nodes and edges with the
 * live check (issues, info, cost) and the run's state on them, turns a palette drop into a node (or,
 * dropped onto a step, into an entry wired into it), and hands every edit back as a new document:
 * connecting, moving, deleting nodes and edges. The selection goes back to the editor.
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
  useReactFlow
} from '@xyflow/react';
import '@xyflow/react/dist/style.css';
import * as React from 'react';

import { IPipelineCheck, IPipelineDoc, IPipelineRun, IStepRun } from '../tokens/pipeline';
import {
  addNode,
  connect,
  DRAG_TYPE,
  dropEntryOnStep,
  IPaletteItem,
  isStep,
  moveNodes,
  nodeFor,
  removeEdges,
  removeNodes
} from './graph';
import { FlowData, NODE_TYPES } from './nodes';

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

/** The canvas; it needs a `ReactFlowProvider` around it (the editor's). */
export function Canvas(props: {
  doc: IPipelineDoc;
  check: IPipelineCheck | null;
  run: IPipelineRun | null;
  onDoc: (doc: IPipelineDoc) => void;
  /** The node now selected (a drop selects what it made or fed), or null. */
  onSelect: (id: string | null) => void;
  onOpenJob: (run: IStepRun) => void;
}): JSX.Element {
  const { doc, check, run, onDoc, onSelect, onOpenJob } = props;
  const flow = useReactFlow();
  const [nodes, setNodes] = React.useState<Node<FlowData>[]>([]);

  React.useEffect(() => {
    setNodes(prev => toFlowNodes(doc, check, run, prev, onOpenJob));
  }, [doc, check, run, onOpenJob]);

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
      onSelect(stepId);
      return;
    }
    const position = flow.screenToFlowPosition({ x: event.clientX, y: event.clientY });
    const node = nodeFor(doc, item, position);
    onDoc(addNode(doc, node));
    onSelect(node.id);
  };

  return (
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
        onSelectionChange={({ nodes: chosen }) => onSelect(chosen.length ? chosen[0].id : null)}
        fitView
        fitViewOptions={{ maxZoom: 1 }}
        proOptions={{ hideAttribution: true }}
      >
        <Background />
        <Controls />
      </ReactFlow>
    </div>
  );
}
