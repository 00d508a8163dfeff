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
 * 20 an hour to one e-mail address or webhook URL: more than an on-call address receives from one
 * provider in a bad hour (a firing and a resolution for each of ten incidents), while no address
 * can be sent more than 480 a day through this server, whoever configures alerts for it.
 */
export const NOTIFICATIONS_PER_TARGET_PER_HOUR = 20;
