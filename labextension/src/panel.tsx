import { ReactWidget, UseSignal } from '@jupyterlab/ui-components';
import * as React from 'react';

import { StarverseModel } from './model';
import { CatalogSection } from './sections/catalog';
import { CostSection } from './sections/cost';
import { DataSection } from './sections/data';
import { EvalsSection } from './sections/evals';
import { ChatSection } from './sections/feedback';
import { InfoSection } from './sections/info';
import { JobsSection } from './sections/jobs';
import { RecipesSection } from './sections/recipes';

/** One collapsible section of the side panel. */
function Section(props: {
  id: string;
  title: string;
  children: React.ReactNode;
}): JSX.Element {
  return (
    <details className="jp-Starverse-section" data-section={props.id} open>
      <summary className="jp-Starverse-sectionTitle">{props.title}</summary>
      <div className="jp-Starverse-sectionBody">{props.children}</div>
    </details>
  );
}

/** The sections below the workspace's, in order: (id, title, component). */
const SECTIONS: ReadonlyArray<[string, string, React.ComponentType]> = [
  ['catalog', 'Catalog', CatalogSection],
  ['jobs', 'Jobs', JobsSection],
  ['cost', 'Costs', CostSection],
  ['data', 'Data preparation', DataSection],
  ['recipes', 'Recipes', RecipesSection],
  ['evals', 'Evaluation', EvalsSection],
  ['chat', 'Chat and feedback', ChatSection]
];

/**
 * The "Starverse" left side panel. Each area adds its section here
 * (sections/<area>.tsx exports one React component).
 */
export class StarversePanel extends ReactWidget {
  constructor(private readonly model: StarverseModel) {
    super();
    this.id = 'jupyter-starverse-panel';
    this.addClass('jp-Starverse-panel');
  }

  render(): JSX.Element {
    return (
      <UseSignal signal={this.model.changed}>
        {() => (
          <div className="jp-Starverse-sections">
            <header className="jp-Starverse-header">Starverse</header>
            <Section id="workspace" title="Workspace">
              <InfoSection info={this.model.info} error={this.model.error} />
            </Section>
            {SECTIONS.map(([id, title, Body]) => (
              <Section key={id} id={id} title={title}>
                <Body />
              </Section>
            ))}
          </div>
        )}
      </UseSignal>
    );
  }
}
