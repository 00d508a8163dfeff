/**
 * A domain's dashboard: the period (1h, 24h, 7d, 30d or a custom range), "compare with the
 * previous period", the headline figures, charts over time and GoAccess-like panels. Clicking an
 * entry of a panel adds a filter that every chart and panel applies (shown as removable chips;
 * "exclude" adds the negation). Period, comparison and filters are in the URL.
 */
import { DashboardCharts } from '../components/DashboardCharts.js';
import { Panel } from '../components/Panel.js';
import { PeriodPicker, rangeOf } from '../components/PeriodPicker.js';
import { Tiles } from '../components/Tiles.js';
import { named } from '../data/metrics.js';
import { useBatch, type Answered } from '../data/reads.js';
import { apiFilters, filterLabel, filterParam, filtersOf, type Filter } from '../filters.js';
import { panelsFor } from '../panels.js';
import { navigate, type Location } from '../router.js';
import { TILE_METRICS, viewQueries } from '../view.js';

/** The URL with `filters` as its `f` parameters. */
function withFilters(location: Location, filters: Filter[]): string {
  const query = new URLSearchParams(location.query);
  query.delete('f');
  for (const f of filters) query.append('f', filterParam(f));
  const search = query.toString();
  return search ? `${location.path}?${search}` : location.path;
}

/** The dashboard of a domain the user may see (its name known). */
export function Dashboard({ id, location }: { id: number; location: Location }) {
  const filters = filtersOf(location.query);
  const compare = location.query.get('compare') === '1';
  const panelSpecs = panelsFor(filters);
  const view = viewQueries({ domains: [id], ...rangeOf(location.query), filters: apiFilters(filters) }, compare, panelSpecs);
  // The headline's batch first, then the panels' (view.ts says why two).
  const [tiles, overTime, byStatus] = useBatch(view.headline) as [Answered, Answered, Answered];
  const panels = useBatch(view.panels);
  // The tiles' requests are the panels' whole.
  const headline = tiles.answer?.results[0];
  const total = headline ? named(TILE_METRICS, headline.metrics).requests : null;
  const addFilter = (f: Filter) => {
    if (!filters.some((g) => filterParam(g) === filterParam(f))) navigate(withFilters(location, [...filters, f]));
  };
  return (
    <>
      <PeriodPicker location={location} />
      {filters.length > 0 && (
        <ul class="chips" aria-label="Filters">
          {filters.map((f, i) => (
            <li>
              {filterLabel(f)}
              <button type="button" aria-label={`Remove filter ${filterLabel(f)}`} onClick={() => navigate(withFilters(location, filters.filter((_, j) => j !== i)))}>
                ×
              </button>
            </li>
          ))}
        </ul>
      )}
      <Tiles answered={tiles} compare={compare} />
      <DashboardCharts overTime={overTime} byStatus={byStatus} />
      <div class="panels">
        {panelSpecs.map((spec, i) => (
          <Panel spec={spec} answered={panels[i]!} total={total} onFilter={addFilter} />
        ))}
      </div>
    </>
  );
}
