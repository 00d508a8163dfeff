/**
 * What one user can make tailhouse send: every alert is a way to send mail or a POST to an address
 * its creator chose, so the alerts of a domain and the notifications to a target are capped.
 */

/**
 * The most alerts one domain may hold (409 beyond): a domain needs a few conditions times a few
 * recipients, far fewer than 50.
 */
export const ALERTS_PER_DOMAIN = 50;

/**
 * The most rules over many domains (scope "all" or a list) one user may have (409 beyond): a rule
 * already covers every domain, so an on-call team needs a few conditions times a few targets, and
 * each rule is a branch of every round's query over all its domains.
 */
export const RULES_PER_USER = 100;

/** The most silences one user may have in force or to come (409 beyond): each is matched against every firing pair each round. */
export const SILENCES_PER_USER = 100;

/**
 * 20 an hour to one e-mail address or webhook URL: more than an on-call address receives from one
 * provider in a bad hour (a firing and a resolution for each of ten incidents), while no address
 * can be sent more than 480 a day through this server, whoever configures alerts for it.
 */
export const NOTIFICATIONS_PER_TARGET_PER_HOUR = 20;
