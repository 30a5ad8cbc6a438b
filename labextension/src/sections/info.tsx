import * as React from 'react';

import { IInfo } from '../tokens/info';

const ROWS: Array<[keyof IInfo, string]> = [
  ['version', 'Version'],
  ['mode', 'Mode'],
  ['gpu_type', 'GPU type'],
  ['backend', 'Backend'],
  ['store', 'Store'],
  ['experiments', 'Experiments'],
  ['currency', 'Currency'],
  ['user', 'User']
];

/** The workspace summary from `GET /jupyter-starverse/info`. */
export function InfoSection(props: {
  info: IInfo | null;
  error: string | null;
}): JSX.Element {
  const { info, error } = props;
  if (error !== null) {
    return (
      <div className="jp-Starverse-error" role="alert">
        Cannot reach the Starverse server extension: {error}
      </div>
    );
  }
  if (info === null) {
    return <div className="jp-Starverse-loading">Loading…</div>;
  }
  return (
    <table className="jp-Starverse-info">
      <tbody>
        {ROWS.map(([key, label]) => (
          <tr key={key} data-field={key}>
            <th>{label}</th>
            <td title={String(info[key] ?? '')}>{info[key] ?? '—'}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}
