/**
 * The pipeline editor: it composes the palette (palette.tsx), the canvas (canvas.tsx) and the side
 * form (form.tsx) under a bar with the live check, the whole pipeline's cost, export and run; it
 * holds the state they share (the catalog, the check, the selection, the run) and talks to the server.
 */
import { ReactFlowProvider } from '@xyflow/react';
import * as React from 'react';

import { errorText } from '../format';
import { usePoll } from '../poll';
import { requestAPI, sendJSON } from '../request';
import { IPriceTable } from '../tokens/costs';
import { IPipelineCheck, IPipelineDoc, IPipelineExport, IPipelineRun, IStepRun } from '../tokens/pipeline';
import { IStoreEntry } from '../tokens/store';
import { Canvas } from './canvas';
import { SideForm } from './form';
import { dropEntryOnStep, pinEntries, removeEdges, removeNodes, setParams } from './graph';
import { IRecipeItem, Palette } from './palette';

/** What the editor needs from the document widget around it. */
export interface IPipelineHost {
  /** The document's path relative to the server root (relative script paths are read beside it). */
  path: () => string;
  /** Open a step's job (monitor and logs). */
  openJob: (run: IStepRun) => void;
  /** Open an exported file in the editor. */
  openPath: (path: string) => void;
}

function Editor(props: {
  doc: IPipelineDoc;
  onDoc: (doc: IPipelineDoc) => void;
  host: IPipelineHost;
}): JSX.Element {
  const { doc, onDoc, host } = props;
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
        <Canvas doc={doc} check={check} run={run} onDoc={onDoc} onSelect={setSelected} onOpenJob={openJob} />
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
