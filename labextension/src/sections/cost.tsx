import * as React from 'react';

import { errorText, formatMoney } from '../format';
import { usePolled } from '../poll';
import { requestAPI } from '../request';
import { BILLING_MODES, BillingMode, IComparison, IEstimate, IPriceTable, IUserTotal } from '../tokens/costs';

/** A billing mode, or every mode side by side. */
type BillingChoice = BillingMode | 'all';

const BILLING_LABELS: Record<BillingChoice, string> = {
  on_demand: 'On demand (per second)',
  daily: 'Daily package',
  weekly: 'Weekly package',
  spot: 'Spot (range)',
  all: 'All, side by side'
};

// Layout of the form: labels left, controls right (the theme's CSS styles the rest).
const FORM_STYLE: React.CSSProperties = {
  display: 'grid',
  gridTemplateColumns: 'auto 1fr',
  gap: '4px 8px',
  alignItems: 'center'
};
const FIELD_STYLE: React.CSSProperties = { display: 'contents' };
const WIDE_STYLE: React.CSSProperties = { gridColumn: '1 / -1' };
const CHEAPEST_STYLE: React.CSSProperties = { fontWeight: 'bold' };
const CAPTION_STYLE: React.CSSProperties = { captionSide: 'bottom', textAlign: 'left' };

/** `230.40 CNY`, or `51.20 – 153.60 CNY` for a spot range. Money stays a decimal string. */
export function formatEstimate(e: IEstimate): string {
  const high = formatMoney(e.high, e.currency);
  return e.low === e.high ? high : `${formatMoney(e.low, '')} – ${high}`;
}

/** The price table in force: per card-hour (GPU) or node-hour (CPU). */
function PriceTableView(props: { table: IPriceTable }): JSX.Element {
  const { table } = props;
  const packages = Object.values(table.packages).filter(p => p !== undefined);
  const rows: Array<[string, IPriceTable['cpu_node']]> = [
    ...Object.entries(table.gpus),
    ['cpu', table.cpu_node]
  ];
  return (
    <table className="jp-Starverse-table jp-Starverse-prices">
      <thead>
        <tr>
          <th>Type</th>
          <th>On demand</th>
          <th>Spot</th>
        </tr>
      </thead>
      <tbody>
        {rows.map(([name, price]) => (
          <tr key={name} data-gpu={name}>
            <th>{name}</th>
            <td>{price.on_demand}</td>
            <td>{price.spot ? `${price.spot[0]}–${price.spot[1]}` : '—'}</td>
          </tr>
        ))}
      </tbody>
      <caption className="jp-Starverse-muted" style={CAPTION_STYLE}>
        {table.currency} per card-hour (CPU: per node-hour)
        {packages.map(p => ` · ${p.name} ${p.hours}h at ${Math.round(Number(p.discount) * 100)}% off`)}
      </caption>
    </table>
  );
}

/** A comparison, cheapest row marked. */
function ComparisonView(props: { comparison: IComparison }): JSX.Element {
  const { comparison } = props;
  const best = comparison.cheapest;
  return (
    <div className="jp-Starverse-comparison" style={WIDE_STYLE}>
      <table className="jp-Starverse-table">
        <tbody>
          {comparison.rows.map(row => {
            const cheapest = row.accelerator === best.accelerator && row.billing === best.billing;
            return (
              <tr
                key={`${row.accelerator}:${row.billing}`}
                className={cheapest ? 'jp-Starverse-cheapest' : undefined}
                style={cheapest ? CHEAPEST_STYLE : undefined}
                title={row.note}
              >
                <th>{row.accelerator}</th>
                <td>{BILLING_LABELS[row.billing]}</td>
                <td>{formatEstimate(row)}</td>
                <td>{cheapest ? 'cheapest' : ''}</td>
              </tr>
            );
          })}
        </tbody>
      </table>
      {comparison.skipped.length > 0 && (
        <div className="jp-Starverse-muted">Not priced: {comparison.skipped.join(', ')}</div>
      )}
    </div>
  );
}

/** The estimate form: GPU type, cards, hours, billing; one estimate or a comparison. */
function EstimateForm(props: { table: IPriceTable }): JSX.Element {
  const types = [...Object.keys(props.table.gpus), 'cpu'];
  const [gpu, setGpu] = React.useState<string>(types.includes('rtx4090') ? 'rtx4090' : types[0]);
  const [cards, setCards] = React.useState('1');
  const [hours, setHours] = React.useState('1');
  const [billing, setBilling] = React.useState<BillingChoice>('on_demand');
  const [allTypes, setAllTypes] = React.useState(false);
  const [result, setResult] = React.useState<IEstimate | IComparison | null>(null);
  const [error, setError] = React.useState<string | null>(null);
  const [busy, setBusy] = React.useState(false);

  const submit = async (event: React.FormEvent): Promise<void> => {
    event.preventDefault();
    setBusy(true);
    const query: Record<string, string> = { gpu, cards, hours };
    try {
      if (billing === 'all' || allTypes) {
        query.billing = billing;
        if (allTypes) {
          query.gpus = 'all';
        }
        setResult(await requestAPI<IComparison>(['cost', 'compare'], {}, query));
      } else {
        query.billing = billing;
        setResult(await requestAPI<IEstimate>(['cost', 'estimate'], {}, query));
      }
      setError(null);
    } catch (reason) {
      setResult(null);
      setError(errorText(reason));
    } finally {
      setBusy(false);
    }
  };

  return (
    <form className="jp-Starverse-estimateForm" style={FORM_STYLE} onSubmit={e => void submit(e)}>
      <label style={FIELD_STYLE}>
        <span>Type</span>
        <select value={gpu} onChange={e => setGpu(e.target.value)} name="gpu">
          {types.map(t => (
            <option key={t} value={t}>
              {t}
            </option>
          ))}
        </select>
      </label>
      <label style={FIELD_STYLE}>
        <span>{gpu === 'cpu' ? 'Nodes' : 'Cards'}</span>
        <input
          name="cards"
          type="number"
          min={1}
          step={1}
          value={cards}
          onChange={e => setCards(e.target.value)}
        />
      </label>
      <label style={FIELD_STYLE}>
        <span>Hours</span>
        <input
          name="hours"
          type="number"
          min={0}
          step="any"
          value={hours}
          onChange={e => setHours(e.target.value)}
        />
      </label>
      <label style={FIELD_STYLE}>
        <span>Billing</span>
        <select
          name="billing"
          value={billing}
          onChange={e => setBilling(e.target.value as BillingChoice)}
        >
          {[...BILLING_MODES, 'all' as const].map(b => (
            <option key={b} value={b}>
              {BILLING_LABELS[b]}
            </option>
          ))}
        </select>
      </label>
      <label className="jp-Starverse-checkbox" style={WIDE_STYLE}>
        <input
          name="compare"
          type="checkbox"
          checked={allTypes}
          onChange={e => setAllTypes(e.target.checked)}
        />
        Compare GPU types
      </label>
      <button type="submit" className="jp-mod-styled jp-mod-accept" style={WIDE_STYLE} disabled={busy}>
        Estimate
      </button>
      {error !== null && (
        <div className="jp-Starverse-error" role="alert" style={WIDE_STYLE}>
          {error}
        </div>
      )}
      {result !== null && 'rows' in result && <ComparisonView comparison={result} />}
      {result !== null && !('rows' in result) && (
        <div className="jp-Starverse-estimate" title={result.note} style={WIDE_STYLE}>
          <strong>{formatEstimate(result)}</strong>
          <div className="jp-Starverse-muted">{result.note}</div>
        </div>
      )}
    </form>
  );
}

/** What the user has spent over all experiments, refreshed every 30 s while visible. */
function TotalView(): JSX.Element {
  const { value: total, error } = usePolled(
    'jupyter-starverse:cost-total',
    30 * 1000,
    () => requestAPI<IUserTotal>(['cost', 'total']),
    { max: 5 * 60 * 1000 }
  );
  if (error !== null) {
    return <div className="jp-Starverse-error">{error}</div>;
  }
  if (total === null) {
    return <div className="jp-Starverse-loading">Loading…</div>;
  }
  const amounts = total.amounts.map(a => formatMoney(a.amount, a.currency)).join(' + ');
  return (
    <div className="jp-Starverse-total">
      <div>
        <strong>{total.user}</strong>: {amounts || 'nothing spent yet'}
        {total.runs > 0 && ` over ${total.runs} run(s), ${total.running} running`}
      </div>
      <ul className="jp-Starverse-costRuns">
        {total.records.slice(0, 10).map(r => (
          <li key={r.path} title={r.path}>
            {r.job_id ?? r.path}: {r.upper_bound ? '≤ ' : ''}
            {formatMoney(r.amount, r.currency)}
            {r.reason && <div className="jp-Starverse-jobReason">{r.reason}</div>}
          </li>
        ))}
      </ul>
      {total.unreadable.length > 0 && (
        <div className="jp-Starverse-error">Unreadable cost records: {total.unreadable.join('; ')}</div>
      )}
    </div>
  );
}

/** The "Costs" section: price table, estimate form, per-user total. */
export function CostSection(): JSX.Element {
  const [table, setTable] = React.useState<IPriceTable | null>(null);
  const [error, setError] = React.useState<string | null>(null);
  React.useEffect(() => {
    let live = true;
    requestAPI<IPriceTable>(['cost', 'prices'])
      .then(t => live && setTable(t))
      .catch(reason => live && setError(errorText(reason)));
    return () => {
      live = false;
    };
  }, []);
  if (error !== null) {
    return (
      <div className="jp-Starverse-error" role="alert">
        {error}
      </div>
    );
  }
  if (table === null) {
    return <div className="jp-Starverse-loading">Loading prices…</div>;
  }
  return (
    <div className="jp-Starverse-cost" style={{ display: 'flex', flexDirection: 'column', gap: '8px' }}>
      <EstimateForm table={table} />
      <PriceTableView table={table} />
      <TotalView />
    </div>
  );
}
