/**
 * Interfaces mirroring the JSON of the server extension (REST namespace `jupyter-starverse`).
 * One file per area under tokens/, each mirroring the `to_json()` of the Python dataclasses it names;
 * this module re-exports them all, so `import { ... } from './tokens'` keeps working.
 */
export * from './tokens/info';
export * from './tokens/jobs';
export * from './tokens/costs';
export * from './tokens/store';
export * from './tokens/modes';
export * from './tokens/pipeline';
export * from './tokens/recipes';
export * from './tokens/chat';
export * from './tokens/feedback';
export * from './tokens/export';
export * from './tokens/data';
export * from './tokens/evals';
