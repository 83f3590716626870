/*-------------------------------------------------------------------------
 *
 * le_notify.h
 *		Parser of the JSON payloads that extension leader_election sends on
 *		channel "leader_election" (internal; unit-tested on its own by
 *		test_notify.c).
 *
 * Payloads are unauthenticated: any role that can connect may NOTIFY on
 * that channel.  The elector uses them only as hints to ask the server.
 *
 *-------------------------------------------------------------------------
 */
#ifndef LE_NOTIFY_H
#define LE_NOTIFY_H

/* How deep a notification's values may nest (the server's metadata limit too). */
#define LE_NOTE_MAX_DEPTH	8

#include <stdbool.h>
#include <stdint.h>

/* Fields of a payload. */
typedef struct le_note
{
	char		event[32];		/* "acquired", "released", "force_released", ... */
	char		lease_key[256];
	bool		has_holder;		/* false for a missing or null holder */
	char		holder[256];
	bool		has_token;
	int64_t		token;
	char		expires_at[64];
} le_note;

/*
 * Parse payload, a JSON object, into *n.  Unknown members are skipped
 * (nested objects and arrays up to a small depth).  Returns false, with *n
 * zeroed, for anything else: bad JSON, trailing garbage, a missing event
 * or lease_key, strings longer than their field, "\u0000" or raw control
 * characters in strings, numbers out of int64 range or not integers for
 * fencing_token.
 */
extern bool le_parse_note(const char *payload, le_note *n);

#endif							/* LE_NOTIFY_H */
