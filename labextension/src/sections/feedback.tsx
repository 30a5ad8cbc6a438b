import * as React from 'react';

import { errorText, formatBytes } from '../format';
import { requestAPI } from '../request';
import { IChatSession, IChatTurn } from '../tokens/chat';
import { IExportTask } from '../tokens/export';
import { IFeedbackRecord, IFeedbackTable } from '../tokens/feedback';

/** How often a streaming answer or a running export is asked for news (ms). */
const STREAM_MS = 150;
const EXPORT_MS = 1000;

const sleep = (ms: number): Promise<void> => new Promise(resolve => setTimeout(resolve, ms));

interface IMessage {
  role: 'user' | 'assistant';
  content: string;
}

/** One answer in the conversation, as the panel tracks it. */
interface IAnswer {
  turn: IChatTurn;
  vote: 'up' | 'down' | null;
  note: string | null;
}

/** `chat: 3 records · 2 up · 1 down · 2 pairs` for the log the panel writes to. */
export function feedbackSummary(table: IFeedbackTable): string {
  const up = table.records.filter(r => r.vote === 'up').length;
  const down = table.records.filter(r => r.vote === 'down').length;
  return `${table.ref}: ${table.records.length} records · ${up} up · ${down} down · ${table.pairs} pairs · ${table.labels} labels`;
}

/** A thumb drawn as SVG (an emoji needs an emoji font, and renders as an empty box without one). */
function Thumb(props: { down?: boolean }): JSX.Element {
  return (
    <svg
      className="jp-Starverse-thumbIcon"
      viewBox="0 0 24 24"
      width="14"
      height="14"
      aria-hidden="true"
      style={props.down ? { transform: 'rotate(180deg)' } : undefined}
    >
      <path
        fill="currentColor"
        d="M2 21h4V9H2v12zm20-11a2 2 0 0 0-2-2h-6.3l1-4.6v-.3c0-.4-.2-.8-.4-1.1L13.2 1 6.6 7.6C6.2 8 6 8.5 6 9v10a2 2 0 0 0 2 2h9c.8 0 1.5-.5 1.8-1.2l3-7.1c.1-.2.2-.5.2-.7v-2z"
      />
    </svg>
  );
}

/** Thumbs, a better answer and a comment under one answer. */
function AnswerView(props: {
  answer: IAnswer;
  model: string;
  onRecord: (vote: 'up' | 'down' | null, better: string, comment: string) => void;
}): JSX.Element {
  const { answer } = props;
  const [better, setBetter] = React.useState('');
  const [comment, setComment] = React.useState('');
  const done = answer.turn.done;
  return (
    <li className="jp-Starverse-chatAnswer" data-turn={answer.turn.id} data-done={done ? 'true' : 'false'}>
      <div className="jp-Starverse-chatPrompt">
        <b>you:</b> {answer.turn.prompt}
      </div>
      <div className="jp-Starverse-chatText">
        <b>{props.model}:</b> {answer.turn.text || '…'}
      </div>
      {answer.turn.error && <div className="jp-Starverse-error">{answer.turn.error}</div>}
      <div className="jp-Starverse-chatVotes">
        <button
          className={'jp-Starverse-thumbUp' + (answer.vote === 'up' ? ' jp-mod-active' : '')}
          title="thumbs up"
          aria-label="thumbs up"
          disabled={!done}
          onClick={() => props.onRecord('up', better, comment)}
        >
          <Thumb /> good
        </button>
        <button
          className={'jp-Starverse-thumbDown' + (answer.vote === 'down' ? ' jp-mod-active' : '')}
          title="thumbs down"
          aria-label="thumbs down"
          disabled={!done}
          onClick={() => props.onRecord('down', better, comment)}
        >
          <Thumb down /> bad
        </button>
        {answer.note && <span className="jp-Starverse-note">{answer.note}</span>}
      </div>
      {done && (
        <details className="jp-Starverse-chatMore">
          <summary>better answer, comment</summary>
          <textarea
            placeholder="a better answer (optional)"
            value={better}
            onChange={e => setBetter(e.target.value)}
          />
          <input placeholder="comment (optional)" value={comment} onChange={e => setComment(e.target.value)} />
          <button onClick={() => props.onRecord(answer.vote, better, comment)}>save feedback</button>
        </details>
      )}
    </li>
  );
}

/** Export the model being chatted with: ONNX fp32/INT8/INT4 with its parity report. */
function ExportForm(props: { model: string; feedback: string }): JSX.Element {
  const [format, setFormat] = React.useState('onnx-int4');
  const [task, setTask] = React.useState<IExportTask | null>(null);
  const [error, setError] = React.useState<string | null>(null);
  const start = async (): Promise<void> => {
    setError(null);
    try {
      let t = await requestAPI<IExportTask>(['export'], {
        method: 'POST',
        body: JSON.stringify({ model: props.model, format })
      });
      setTask(t);
      while (t.state === 'running') {
        await sleep(EXPORT_MS);
        t = await requestAPI<IExportTask>(['export', t.id]);
        setTask(t);
      }
    } catch (reason) {
      setError(errorText(reason));
    }
  };
  const result = task?.result;
  return (
    <div className="jp-Starverse-export" data-state={task?.state ?? 'idle'}>
      <select value={format} onChange={e => setFormat(e.target.value)} aria-label="export format">
        <option value="onnx">onnx (fp32)</option>
        <option value="onnx-int8">onnx-int8</option>
        <option value="onnx-int4">onnx-int4</option>
      </select>
      <button disabled={!props.model || task?.state === 'running'} onClick={() => void start()}>
        export
      </button>
      {error && <div className="jp-Starverse-error">{error}</div>}
      {task && task.state === 'running' && <div className="jp-Starverse-note">{task.phase}…</div>}
      {task?.error && <div className="jp-Starverse-error">{task.error}</div>}
      {result && (
        <div className="jp-Starverse-exportReport">
          <div>
            {result.state}
            {result.target ? ` → ${result.target}` : ' (not stored)'} in {result.seconds.toFixed(1)} s
          </div>
          <table>
            <thead>
              <tr>
                <th>graph</th>
                <th>size</th>
                <th>max |Δlogit|</th>
                <th>greedy agree</th>
                <th>perplexity</th>
                <th>ms/token</th>
              </tr>
            </thead>
            <tbody>
              {result.figures.map(f => (
                <tr key={f.graph}>
                  <td>{f.graph}</td>
                  <td>{formatBytes(f.bytes)}</td>
                  <td>{f.max_abs_logit_diff.toExponential(2)}</td>
                  <td>{(f.greedy_agreement * 100).toFixed(1)}%</td>
                  <td>
                    {f.perplexity.toFixed(2)} ({(f.perplexity_change * 100).toFixed(2)}%)
                  </td>
                  <td>
                    {f.ms_per_token.toFixed(3)} (torch {f.ms_per_token_torch.toFixed(3)})
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
          {result.failures.map(f => (
            <div key={f} className="jp-Starverse-error">
              parity check failed: {f}
            </div>
          ))}
        </div>
      )}
    </div>
  );
}

/** Chat with a model (a store version, an experiment's output or a folder) and vote on its answers. */
export function ChatSection(): JSX.Element {
  const [models, setModels] = React.useState<string[]>([]);
  const [model, setModel] = React.useState('');
  const [log, setLog] = React.useState('chat');
  const [session, setSession] = React.useState<IChatSession | null>(null);
  const [loading, setLoading] = React.useState(false);
  const [prompt, setPrompt] = React.useState('');
  const [answers, setAnswers] = React.useState<IAnswer[]>([]);
  const [summary, setSummary] = React.useState<string | null>(null);
  const [error, setError] = React.useState<string | null>(null);
  const messages = React.useRef<IMessage[]>([]);

  // the store's cached models and experiments with a saved model: re-read when the picker opens
  const loadModels = (): void => {
    requestAPI<string[]>(['chat', 'models'])
      .then(setModels)
      .catch(reason => setError(errorText(reason)));
  };
  React.useEffect(loadModels, []);

  const patch = (id: string, change: Partial<IAnswer>): void =>
    setAnswers(all => all.map(a => (a.turn.id === id ? { ...a, ...change } : a)));

  const load = async (): Promise<void> => {
    setLoading(true);
    setError(null);
    try {
      if (session) {
        await requestAPI<null>(['chat', 'sessions', session.id], { method: 'DELETE' });
      }
      setSession(
        await requestAPI<IChatSession>(['chat', 'sessions'], { method: 'POST', body: JSON.stringify({ model }) })
      );
      messages.current = [];
      setAnswers([]);
    } catch (reason) {
      setError(errorText(reason));
    } finally {
      setLoading(false);
    }
  };

  const send = async (): Promise<void> => {
    if (!session || !prompt.trim()) {
      return;
    }
    setError(null);
    const asked: IMessage[] = [...messages.current, { role: 'user', content: prompt }];
    try {
      let turn = await requestAPI<IChatTurn>(['chat', 'sessions', session.id, 'turns'], {
        method: 'POST',
        body: JSON.stringify({ messages: asked, max_new_tokens: 64 })
      });
      setPrompt('');
      setAnswers(all => [...all, { turn, vote: null, note: null }]);
      let text = '';
      let after = 0;
      while (!turn.done) {
        await sleep(STREAM_MS);
        turn = await requestAPI<IChatTurn>(['chat', 'sessions', session.id, 'turns', turn.id], {}, {
          after: String(after)
        });
        text += turn.pieces.join('');
        after = turn.next;
        patch(turn.id, { turn: { ...turn, text } });
      }
      messages.current = [...asked, { role: 'assistant', content: turn.text }];
    } catch (reason) {
      setError(errorText(reason));
    }
  };

  const record = async (answer: IAnswer, vote: 'up' | 'down' | null, better: string, comment: string) => {
    try {
      await requestAPI<IFeedbackRecord>(['feedback', 'records'], {
        method: 'POST',
        body: JSON.stringify({
          log,
          model: session?.model ?? model,
          prompt: answer.turn.prompt,
          answer: answer.turn.text || '(empty answer)',
          vote,
          better: better || null,
          comment: comment || null,
          answer_id: answer.turn.id,
          session: session?.id ?? null
        })
      });
      patch(answer.turn.id, { vote, note: `recorded in ${log}` });
      setSummary(feedbackSummary(await requestAPI<IFeedbackTable>(['feedback', 'table'], {}, { ref: log })));
    } catch (reason) {
      patch(answer.turn.id, { note: errorText(reason) });
    }
  };

  return (
    <div className="jp-Starverse-chat">
      <div className="jp-Starverse-chatModel">
        <select
          className="jp-Starverse-chatPicker"
          aria-label="store model"
          title="the store's models and experiments with a saved model"
          value={models.includes(model) ? model : ''}
          onFocus={loadModels}
          onChange={e => setModel(e.target.value)}
        >
          <option value="">{models.length ? 'pick a model…' : 'no model on the store'}</option>
          {models.map(m => (
            <option key={m} value={m}>
              {m}
            </option>
          ))}
        </select>
        <input
          placeholder="or hf:ORG/REPO@REV, exp:EXPERIMENT, a folder"
          aria-label="model"
          value={model}
          onChange={e => setModel(e.target.value)}
        />
        <button disabled={!model.trim() || loading} onClick={() => void load()}>
          {loading ? 'loading…' : 'load model'}
        </button>
      </div>
      <label className="jp-Starverse-chatLog">
        votes go to <input aria-label="feedback log" value={log} onChange={e => setLog(e.target.value)} />
      </label>
      {session && (
        <div className="jp-Starverse-note jp-Starverse-chatReady" data-session={session.id}>
          chatting with {session.model}
        </div>
      )}
      {error && <div className="jp-Starverse-error">{error}</div>}
      <ul className="jp-Starverse-chatAnswers">
        {answers.map(a => (
          <AnswerView
            key={a.turn.id}
            answer={a}
            model={session?.model ?? model}
            onRecord={(vote, better, comment) => void record(a, vote, better, comment)}
          />
        ))}
      </ul>
      <div className="jp-Starverse-chatAsk">
        <textarea
          placeholder="ask something"
          aria-label="prompt"
          disabled={!session}
          value={prompt}
          onChange={e => setPrompt(e.target.value)}
        />
        <button disabled={!session || !prompt.trim()} onClick={() => void send()}>
          send
        </button>
      </div>
      {summary && <div className="jp-Starverse-chatSummary">{summary}</div>}
      {session && <ExportForm model={session.model} feedback={log} />}
    </div>
  );
}
