/**
 * An addr-spec without quoting or comments, lower-case; the domain may be a single label
 * (`admin@localhost` is the default administrator), which zod's own e-mail check refuses.
 */
export const EMAIL_ADDRESS = /^[a-z0-9.!#$%&'*+/=?^_`{|}~-]+@[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*$/;

/** A lower-case host name: dot-separated labels of letters, digits and inner hyphens. */
export const HOST_NAME = /^(?=.{1,253}$)([a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*$/;

