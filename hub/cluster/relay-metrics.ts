/**
 * The relay between hubs in the hub's Prometheus registry (read from the relay's own counts at each scrape):
 *
 *   expertswarm_hub_relay_items_total{side="sent",outcome="answered"|"refused"}    this hub's items to other hubs' workers
 *   expertswarm_hub_relay_items_total{side="served",outcome="answered"|"failed"}  other hubs' items to workers here
 *   expertswarm_hub_relay_open                                                     relays open from here to other hubs
 *
 *   registerRelayMetrics(metrics.registry, () => hub.hubRelayStats());
 */
import { Counter, Gauge, type Registry } from 'prom-client';
import type { RelayLinkStats } from './relay-links.ts';
import type { HubRelayStats } from './relay-server.ts';

export interface RelayReadings {
  open: readonly string[];
  dialed: RelayLinkStats;
  served: HubRelayStats;
}

export function registerRelayMetrics(registry: Registry, read: () => RelayReadings | null): void {
  const registers = [registry];
  new Counter({
    name: 'expertswarm_hub_relay_items_total',
    help: 'Work items over the relay between hubs: sent to workers of other hubs, or served here for other hubs, by outcome.',
    labelNames: ['side', 'outcome'],
    registers,
    collect() {
      this.reset();
      const r = read();
      if (!r) return;
      this.inc({ side: 'sent', outcome: 'answered' }, r.dialed.answered);
      this.inc({ side: 'sent', outcome: 'refused' }, r.dialed.refused);
      this.inc({ side: 'served', outcome: 'answered' }, r.served.items - r.served.failed);
      this.inc({ side: 'served', outcome: 'failed' }, r.served.failed);
    },
  });
  new Gauge({
    name: 'expertswarm_hub_relay_open',
    help: 'Relays open from this hub to other hubs of the cluster.',
    registers,
    collect() {
      this.set(read()?.open.length ?? 0);
    },
  });
}
