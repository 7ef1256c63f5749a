/**
 * The dashboard's wire format, shared with the server: one definition, so a
 * change on either side is a type error on the other.
 */
export type * from '../../../server/dashboard/protocol.ts';
export { CLOSE_UNAUTHORIZED, WS_SUBPROTOCOL, WS_TOKEN_PREFIX } from '../../../server/dashboard/protocol.ts';
