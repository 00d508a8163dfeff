/**
 * Webhook target addresses (src/alerts/addresses.ts): every address of issue 13, an address of
 * every range it names, and the usual internal ones, each with the range it must be refused as;
 * and public addresses that must pass, in each form the check unwraps.
 */
export const REFUSED_ADDRESSES: [address: string, range: string][] = [
  // The two targets that passed the old check: 127.0.0.1 embedded two ways.
  ['::7f00:1', 'outside global unicast 2000::/3'], // IPv4-compatible (::/96)
  ['2002:7f00:1::', '6to4'],
  // The ranges the issue names.
  ['64:ff9b:1::7f00:1', 'rfc6052'], // local-use NAT64 64:ff9b:1::/48
  ['64:ff9b:1:ffff::5db8:d822', 'rfc6052'], // even carrying a public IPv4 address
  ['fec0::1', 'deprecatedSiteLocal'],
  ['100::1', 'discard'],
  ['192.0.2.1', 'reserved'],
  // Other forms that embed an IPv4 address.
  ['2001:0:4136:e378:8000:63bf:3fff:fdd2', 'teredo'],
  ['::ffff:0:7f00:1', 'rfc6145'],
  ['::ffff:10.0.0.1', 'private'], // IPv4-mapped: judged as the IPv4 address
  ['::ffff:127.0.0.1', 'loopback'],
  ['64:ff9b::7f00:1', 'loopback'], // well-known NAT64: judged as the IPv4 address
  ['64:ff9b::a9fe:a9fe', 'linkLocal'],
  // IPv4.
  ['0.0.0.0', 'unspecified'],
  ['0.1.2.3', 'unspecified'],
  ['10.1.2.3', 'private'],
  ['100.64.0.1', 'carrierGradeNat'],
  ['127.0.0.1', 'loopback'],
  ['169.254.169.254', 'linkLocal'],
  ['172.16.0.1', 'private'],
  ['192.0.0.8', 'reserved'],
  ['192.168.1.1', 'private'],
  ['198.18.0.1', 'reserved'],
  ['198.51.100.7', 'reserved'],
  ['203.0.113.9', 'reserved'],
  ['224.0.0.1', 'multicast'],
  ['240.0.0.1', 'reserved'],
  ['255.255.255.255', 'broadcast'],
  // IPv6.
  ['::', 'unspecified'],
  ['::1', 'loopback'],
  ['fd00::1', 'uniqueLocal'],
  ['fe80::1', 'linkLocal'],
  ['ff02::1', 'multicast'],
  ['2001:db8::1', 'reserved'],
  ['4000::1', 'outside global unicast 2000::/3'],
];

export const PUBLIC_ADDRESSES = ['93.184.216.34', '1.1.1.1', '2606:2800:220:1:248:1893:25c8:1946', '::ffff:93.184.216.34', '64:ff9b::5db8:d822'];
