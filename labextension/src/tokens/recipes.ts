/**
 * Types of the recipes area (`GET recipes`, `GET recipes/NAME`): a recipe, its parameters, and the
 * published reproduction it follows (topology, schedule, reported figures, small variant).
 */

import { IEstimate } from './costs';

/** One recipe parameter: `Param.to_json()`. */
export interface IRecipeParam {
  name: string;
  default: string | number | boolean;
  kind: 'int' | 'float' | 'str' | 'bool';
  help: string;
  choices: string[];
}

/** A published set-up of a reproduction: `Topology.to_json()`. */
export interface IRecipeTopology {
  nodes: number;
  gpus_per_node: number;
  gpu: string;
  hours: number;
  cards: number;
}

/** `Reproduction.to_json()`. */
export interface IRecipeReproduction {
  model: string;
  stage: string;
  source: string;
  published: IRecipeTopology;
  schedule: Record<string, string | number | number[]>;
  reported: Record<string, number>;
  small: Record<string, string | number>;
  caveat: string;
  /** the store model / dataset a full-size launch uses unless told otherwise */
  model_ref: string;
  data_ref: string;
  /** those of `--small` (built offline into the store on first use) */
  small_model: string;
  small_data: string;
  /** what the stage trains (the rest is frozen) */
  trains: string;
}

/** `GET recipes` items and `GET recipes/NAME`: `RecipeInfo.to_json()`. */
export interface IRecipe {
  name: string;
  title: string;
  objective: 'cpt' | 'sft' | 'dpo' | 'kto' | 'reward' | 'ppo' | 'vlm';
  description: string;
  data_format: string;
  runner: 'starverse' | 'llamafactory' | 'megatron';
  templates: string[];
  params: IRecipeParam[];
  resources: { nodes: number; procs_per_node: number; accelerator: string; hours: number };
  reference_model: boolean;
  reproduction: IRecipeReproduction | null;
  /** The estimate of the default (or published) resources, or why it could not be priced. */
  cost: IEstimate | string;
}
