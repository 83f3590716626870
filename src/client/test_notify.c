/*-------------------------------------------------------------------------
 *
 * test_notify.c
 *		Unit test of the NOTIFY payload parser (le_notify.c), hostile
 *		payloads included.  Prints TAP; run by test/t/110_notify_parser.pl.
 *
 * Locking rules: single-threaded.
 *
 *-------------------------------------------------------------------------
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "le_notify.h"

static int	ntests;
static int	nfailed;

/* Report one check. */
static void
check(bool ok, const char *what)
{
	ntests++;
	if (!ok)
		nfailed++;
	printf("%s %d - %s\n", ok ? "ok" : "not ok", ntests, what);
}

/* Expect payload to be rejected (and *n zeroed). */
static void
reject(const char *payload, const char *what)
{
	le_note		n;
	bool		ok;

	memset(&n, 0x55, sizeof(n));
	ok = !le_parse_note(payload, &n) && n.event[0] == '\0' && n.lease_key[0] == '\0' &&
		!n.has_token && !n.has_holder;
	check(ok, what);
}

/* Parse payload, expecting success. */
static bool
accept_note(const char *payload, le_note *n, const char *what)
{
	bool		ok = le_parse_note(payload, n);

	check(ok, what);
	return ok;
}

/* A string of n copies of c (malloc'ed). */
static char *
repeat(char c, size_t n)
{
	char	   *s = malloc(n + 1);

	if (s == NULL)
		abort();
	memset(s, c, n);
	s[n] = '\0';
	return s;
}

/* Entry point: all checks, TAP on stdout. */
int
main(void)
{
	le_note		n;
	char		buf[4096];
	char	   *big;

	/* what the extension sends */
	if (accept_note("{\"event\":\"acquired\",\"lease_key\":\"k\",\"holder\":\"a\",\"fencing_token\":42,\"expires_at\":\"2026-01-01T00:00:00.000Z\"}",
					&n, "a real acquired payload"))
	{
		check(strcmp(n.event, "acquired") == 0 && strcmp(n.lease_key, "k") == 0 &&
			  n.has_holder && strcmp(n.holder, "a") == 0 && n.has_token && n.token == 42 &&
			  strcmp(n.expires_at, "2026-01-01T00:00:00.000Z") == 0, "its fields");
	}
	if (accept_note("{\"event\":\"acquired\",\"lease_key\":\"k\",\"holder\":\"a\",\"fencing_token\":43,\"expires_at\":\"2026-01-01T00:00:00.000Z\",\"metadata\":{\"addr\": \"10.0.0.5:8080\", \"tags\": [1, null]}}",
					&n, "a 1.1 payload: metadata last"))
		check(n.has_token && n.token == 43 && strcmp(n.holder, "a") == 0, "the 1.0 members read as before");
	if (accept_note("{\"event\":\"metadata\",\"lease_key\":\"k\",\"holder\":\"a\",\"fencing_token\":43,\"expires_at\":\"2026-01-01T00:00:00.000Z\",\"metadata\":\"x\"}",
					&n, "a 1.1 metadata event"))
		check(strcmp(n.event, "metadata") == 0, "its event");
	if (accept_note(" { \"event\" : \"released\" ,\n\t\"lease_key\":\"k\", \"holder\": null, \"fencing_token\": null } ",
					&n, "white space and nulls"))
		check(!n.has_holder && !n.has_token, "null holder and token are absent");
	if (accept_note("{\"event\":\"x\",\"lease_key\":\"k\",\"extra\":{\"a\":[1,2,{\"b\":null}],\"c\":true},\"more\":[false,-1.5e3,\"s\"]}",
					&n, "unknown members with nested values are skipped"))
		check(strcmp(n.event, "x") == 0, "and the known ones kept");

	/* escapes */
	if (accept_note("{\"event\":\"e\",\"lease_key\":\"a\\\"b\\\\c\\/d\\n\\t\\u00e9\\u20ac\\ud83d\\ude00\"}",
					&n, "escapes"))
		check(strcmp(n.lease_key, "a\"b\\c/d\n\t\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80") == 0,
			  "decoded to UTF-8, surrogate pair included");
	reject("{\"event\":\"e\",\"lease_key\":\"a\\u0000b\"}", "\\u0000 in a string");
	reject("{\"event\":\"e\",\"lease_key\":\"a\\ud83d\"}", "lone high surrogate");
	reject("{\"event\":\"e\",\"lease_key\":\"a\\ude00\"}", "lone low surrogate");
	reject("{\"event\":\"e\",\"lease_key\":\"a\\u12\"}", "short \\u escape");
	reject("{\"event\":\"e\",\"lease_key\":\"a\\u12G4\"}", "bad hex in \\u escape");
	reject("{\"event\":\"e\",\"lease_key\":\"a\\q\"}", "unknown escape");
	reject("{\"event\":\"e\",\"lease_key\":\"a\nb\"}", "raw newline in a string");
	reject("{\"event\":\"e\",\"lease_key\":\"a\\", "backslash at the end");

	/* truncated */
	reject("", "empty payload");
	reject("{", "just a brace");
	reject("{\"event\":\"acquired\",\"lease_key\":\"k\"", "missing closing brace");
	reject("{\"event\":\"acquired\",\"lease_key\":\"k", "truncated inside a string");
	reject("{\"event\":\"acquired\",\"lease_key\":\"k\",\"fencing_token\":", "truncated before a value");
	reject("{\"event\":\"acquired\",\"lease_key\":\"k\",\"fencing_token\":4", "truncated inside a number");
	reject("{\"event\":\"acquired\",\"lease_key\":\"k\",\"x\":[1,2", "truncated inside an array");
	reject("{\"event\":\"acquired\",\"lease_key\":\"k\",}", "trailing comma");
	reject("{\"event\":\"acquired\",\"lease_key\":\"k\"} x", "trailing garbage");
	reject("{\"event\":\"acquired\",\"lease_key\":\"k\"}{}", "two objects");
	reject("[\"event\",\"acquired\"]", "an array");
	reject("{\"event\":\"acquired\"}", "no lease_key");
	reject("{\"lease_key\":\"k\"}", "no event");
	reject("{\"event\":\"acquired\" \"lease_key\":\"k\"}", "missing comma");
	reject("{\"event\" \"acquired\",\"lease_key\":\"k\"}", "missing colon");
	reject("{\"event\":\"a\",\"lease_key\":\"k\",\"x\":tru}", "bad literal");

	/* numbers */
	if (accept_note("{\"event\":\"a\",\"lease_key\":\"k\",\"fencing_token\":9223372036854775807}",
					&n, "largest int64 token"))
		check(n.token == INT64_MAX, "read exactly");
	reject("{\"event\":\"a\",\"lease_key\":\"k\",\"fencing_token\":9223372036854775808}", "token above int64");
	reject("{\"event\":\"a\",\"lease_key\":\"k\",\"fencing_token\":99999999999999999999999999999}", "huge token");
	reject("{\"event\":\"a\",\"lease_key\":\"k\",\"fencing_token\":1.5}", "fractional token");
	reject("{\"event\":\"a\",\"lease_key\":\"k\",\"fencing_token\":1e3}", "token with exponent");
	reject("{\"event\":\"a\",\"lease_key\":\"k\",\"fencing_token\":\"7\"}", "token as a string");
	reject("{\"event\":\"a\",\"lease_key\":\"k\",\"fencing_token\":0x10}", "hex token");
	reject("{\"event\":\"a\",\"lease_key\":\"k\",\"fencing_token\":01}", "leading zero");
	reject("{\"event\":\"a\",\"lease_key\":\"k\",\"fencing_token\":-}", "lone minus");
	if (accept_note("{\"event\":\"a\",\"lease_key\":\"k\",\"fencing_token\":-5}", &n, "negative token parses"))
		check(n.token == -5, "as -5 (the caller decides what it is worth)");

	/* long strings */
	big = repeat('k', 300);
	snprintf(buf, sizeof(buf), "{\"event\":\"a\",\"lease_key\":\"%s\"}", big);
	reject(buf, "lease_key longer than its field is rejected, not truncated");
	snprintf(buf, sizeof(buf), "{\"event\":\"a\",\"lease_key\":\"k\",\"holder\":\"%s\"}", big);
	reject(buf, "holder longer than its field");
	snprintf(buf, sizeof(buf), "{\"event\":\"a\",\"lease_key\":\"k\",\"%s\":1}", big);
	check(le_parse_note(buf, &n), "an unknown key longer than any known one is skipped");
	free(big);
	big = repeat('x', 1000000);
	{
		char	   *p = malloc(strlen(big) + 64);

		if (p == NULL)
			abort();
		sprintf(p, "{\"event\":\"a\",\"lease_key\":\"k\",\"pad\":\"%s\"}", big);
		check(le_parse_note(p, &n) && strcmp(n.lease_key, "k") == 0, "a 1 MB unknown member");
		sprintf(p, "{\"event\":\"a\",\"lease_key\":\"k\",\"pad\":\"%s", big);
		reject(p, "a 1 MB unterminated string");
		free(p);
	}
	free(big);

	/* nesting */
	{
		char	   *p = malloc(200100);
		size_t		k = 0;

		if (p == NULL)
			abort();
		k += sprintf(p, "{\"event\":\"a\",\"lease_key\":\"k\",\"x\":");
		for (int i = 0; i < 100000; i++)
			p[k++] = '[';
		p[k] = '\0';
		reject(p, "100000 nested arrays (bounded depth, no stack overflow)");
		k = sprintf(p, "{\"event\":\"a\",\"lease_key\":\"k\",\"x\":[[[[1]]]]}");
		check(le_parse_note(p, &n), "shallow nesting is fine");
		free(p);
	}
	reject("{\"event\":{\"nested\":1},\"lease_key\":\"k\"}", "event as an object");
	reject("{\"event\":\"a\",\"lease_key\":[\"k\"]}", "lease_key as an array");
	{
		const char withnul[] = "{\"event\":\"a\",\"lease_key\":\"k\0\"}";

		/* a C string ends at the NUL: what follows is never read */
		reject(withnul, "embedded NUL byte ends the payload early");
	}
	reject(NULL, "NULL payload");

	printf("1..%d\n", ntests);
	return nfailed == 0 ? 0 : 1;
}
