/**
 * Which addresses a webhook may reach: the public unicast Internet, nothing else. A user's URL
 * must not make the server call its own network (loopback, private ranges, cloud metadata on
 * link-local) nor addresses that are not meant to be reached at all.
 *
 * One classification, ipaddr.js's special-purpose ranges (kept in step with the IANA registries),
 * and for IPv6 also IANA's global unicast block:
 *
 * - IPv4: only what ipaddr.js classes `unicast`. Refused: 0.0.0.0/8, 10/8, 100.64/10, 127/8,
 *   169.254/16, 172.16/12, 192.0.0/24, the documentation nets (192.0.2/24, 198.51.100/24,
 *   203.0.113/24), 192.88.99/24, 192.168/16, 198.18/15, multicast, 240/4, broadcast, AS112, AMT.
 * - IPv6: only addresses in 2000::/3, the one block IANA allocates global unicast from (outside
 *   it: ::/96 IPv4-compatible, 100::/64 discard, fc00::/7, fe80::/10, fec0::/10, ff00::/8 and
 *   unallocated space), that ipaddr.js classes `unicast` (refused within 2000::/3:
 *   2001:db8::/32 documentation, 2002::/16 6to4, 2001::/32 Teredo, 2001::/23 protocol
 *   assignments, ORCHID, 3fff::/20 and the like).
 * - IPv6 forms that carry an IPv4 address: IPv4-mapped `::ffff:a.b.c.d` is that IPv4 address (a
 *   dual-stack socket connects to it), and so is the well-known NAT64 prefix 64:ff9b::/96 (a
 *   DNS64 resolver on an IPv6-only host answers with it for every IPv4-only name): both are
 *   judged as the IPv4 address they carry. Every other form is refused outright, whatever it
 *   carries: IPv4-compatible ::/96 (deprecated since 2006), 6to4 and Teredo (deprecated relays
 *   that reach IPv4 hosts the check would not see), IPv4-translated ::ffff:0:0:0/96, and the
 *   local-use NAT64 prefix 64:ff9b:1::/48, where the IPv4 address sits wherever the operator's
 *   prefix length puts it, unknown here.
 */
import { lookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import ipaddr from 'ipaddr.js';

const GLOBAL_UNICAST = ipaddr.parseCIDR('2000::/3');
const NAT64_WELL_KNOWN = ipaddr.parseCIDR('64:ff9b::/96');

/** Why an address is not public: its range's name; null: public unicast. */
export function nonPublicRange(address: string): string | null {
  if (!isIP(address)) return 'not an IP address';
  const parsed = ipaddr.parse(address);
  if (parsed.kind() === 'ipv4') {
    const range = parsed.range();
    return range === 'unicast' ? null : range;
  }
  const v6 = parsed as ipaddr.IPv6;
  if (v6.isIPv4MappedAddress()) return nonPublicRange(v6.toIPv4Address().toString());
  if (v6.match(NAT64_WELL_KNOWN)) return nonPublicRange(ipaddr.fromByteArray(v6.toByteArray().slice(12)).toString());
  const range = v6.range();
  if (range !== 'unicast') return range;
  return v6.match(GLOBAL_UNICAST) ? null : 'outside global unicast 2000::/3';
}

/** Why a webhook may not reach an address (a range's name), or null when it may. */
export type AddressRule = (address: string) => string | null;

/**
 * The rule for users' webhook targets: public unicast (nonPublicRange), and besides the networks the
 * operator trusts (WEBHOOK_ALLOW_NETWORKS, CIDRs: a chat server on the provider's own network). An
 * IPv4-mapped IPv6 address is judged as the IPv4 address it carries, as everywhere here.
 */
export function webhookAddressRule(allowNetworks: readonly string[]): AddressRule {
  if (allowNetworks.length === 0) return nonPublicRange;
  const networks = allowNetworks.map((cidr) => ipaddr.parseCIDR(cidr));
  return (address) => {
    if (!isIP(address)) return nonPublicRange(address);
    const parsed = ipaddr.process(address);
    return networks.some(([network, bits]) => network.kind() === parsed.kind() && parsed.match(network, bits)) ? null : nonPublicRange(address);
  };
}

/** The addresses a host name resolves to (all of them, as the system resolver answers). */
export type ResolveAll = (hostname: string) => Promise<string[]>;

export const systemResolve: ResolveAll = async (hostname) => (await lookup(hostname, { all: true, verbatim: true })).map((a) => a.address);

export interface NonPublicAddress {
  address: string;
  range: string;
}

/**
 * The first address `rule` refuses among those of a URL's host (`hostname` as `URL` gives it, IPv6
 * in brackets): the literal itself, or each address its name resolves to. Null: all allowed.
 * Resolution errors propagate.
 */
export async function nonPublicAddressOf(hostname: string, resolve: ResolveAll = systemResolve, rule: AddressRule = nonPublicRange): Promise<NonPublicAddress | null> {
  const host = hostname.replace(/^\[|\]$/g, '');
  const addresses = isIP(host) ? [host] : await resolve(host);
  for (const address of addresses) {
    const range = rule(address);
    if (range !== null) return { address, range };
  }
  return null;
}
