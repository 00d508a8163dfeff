-- Two more alert conditions, computed by the statistics' registry as the dashboards show them
-- (src/alerts/metrics.ts, src/stats/registry.ts): the 95th percentile of the response times and the
-- share of 4xx answers.
alter table alerts drop constraint alerts_condition_check;
alter table alerts add constraint alerts_condition_check
  check (condition in ('errorRate', 'clientErrorRate', 'requestCount', 'averageResponseTime', 'p95ResponseTime'));
