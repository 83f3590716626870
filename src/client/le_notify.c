/*-------------------------------------------------------------------------
 *
 * le_notify.c
 *		A strict, bounded parser of the extension's NOTIFY payloads (see
 *		le_notify.h).
 *
 * Locking rules: none (pure function of its input).
 *
 * Recursion is bounded by LE_NOTE_MAX_DEPTH; every string is checked
 * against the size of its destination; nothing is allocated.
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "le_notify.h"


/* Parser position. */
typedef struct cursor
{
	const char *s;
} cursor;

/* Skip JSON white space. */
static void
skip_ws(cursor *c)
{
	while (*c->s == ' ' || *c->s == '\t' || *c->s == '\n' || *c->s == '\r')
		c->s++;
}

/* Value of one hex digit, -1 if not one. */
static int
hexval(char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

/* Read four hex digits of a \u escape. */
static bool
hex4(cursor *c, unsigned *v)
{
	*v = 0;
	for (int i = 0; i < 4; i++)
	{
		int			h = hexval(c->s[i]);

		if (h < 0)
			return false;
		*v = *v * 16 + (unsigned) h;
	}
	c->s += 4;
	return true;
}

/* Append one byte to out (len bytes incl. NUL); false if it does not fit. */
static bool
put(char *out, size_t len, size_t *n, unsigned char b)
{
	if (out == NULL)
		return true;			/* skipping */
	if (*n + 1 >= len)
		return false;
	out[(*n)++] = (char) b;
	return true;
}

/*
 * Decode a JSON string at the cursor (at its opening quote) into out, or
 * just skip it when out is NULL.
 */
static bool
parse_string(cursor *c, char *out, size_t len)
{
	size_t		n = 0;

	if (*c->s != '"')
		return false;
	c->s++;
	for (;;)
	{
		unsigned char ch = (unsigned char) *c->s;

		if (ch == '\0' || ch < 0x20)
			return false;		/* truncated, or a raw control character */
		c->s++;
		if (ch == '"')
			break;
		if (ch != '\\')
		{
			if (!put(out, len, &n, ch))
				return false;
			continue;
		}
		ch = (unsigned char) *c->s++;
		switch (ch)
		{
			case '"':
			case '\\':
			case '/':
				break;
			case 'b':
				ch = '\b';
				break;
			case 'f':
				ch = '\f';
				break;
			case 'n':
				ch = '\n';
				break;
			case 'r':
				ch = '\r';
				break;
			case 't':
				ch = '\t';
				break;
			case 'u':
				{
					unsigned	cp;

					if (!hex4(c, &cp) || cp == 0)
						return false;	/* \u0000 would cut the string short */
					if (cp >= 0xD800 && cp <= 0xDBFF)
					{
						unsigned	lo;

						if (c->s[0] != '\\' || c->s[1] != 'u')
							return false;
						c->s += 2;
						if (!hex4(c, &lo) || lo < 0xDC00 || lo > 0xDFFF)
							return false;
						cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
					}
					else if (cp >= 0xDC00 && cp <= 0xDFFF)
						return false;	/* lone low surrogate */
					if (cp < 0x80)
					{
						if (!put(out, len, &n, (unsigned char) cp))
							return false;
					}
					else if (cp < 0x800)
					{
						if (!put(out, len, &n, 0xC0 | (cp >> 6)) ||
							!put(out, len, &n, 0x80 | (cp & 0x3F)))
							return false;
					}
					else if (cp < 0x10000)
					{
						if (!put(out, len, &n, 0xE0 | (cp >> 12)) ||
							!put(out, len, &n, 0x80 | ((cp >> 6) & 0x3F)) ||
							!put(out, len, &n, 0x80 | (cp & 0x3F)))
							return false;
					}
					else if (!put(out, len, &n, 0xF0 | (cp >> 18)) ||
							 !put(out, len, &n, 0x80 | ((cp >> 12) & 0x3F)) ||
							 !put(out, len, &n, 0x80 | ((cp >> 6) & 0x3F)) ||
							 !put(out, len, &n, 0x80 | (cp & 0x3F)))
						return false;
					continue;
				}
			default:
				return false;	/* unknown escape, or the end of the input */
		}
		if (!put(out, len, &n, ch))
			return false;
	}
	if (out)
		out[n] = '\0';
	return true;
}

/*
 * Parse a JSON number at the cursor.  When v is not NULL it must be an
 * integer within int64; otherwise any valid JSON number is skipped.
 */
static bool
parse_number(cursor *c, int64_t *v)
{
	const char *start = c->s;
	const char *p = c->s;
	bool		integral = true;

	if (*p == '-')
		p++;
	if (*p == '0')
		p++;
	else if (*p >= '1' && *p <= '9')
		while (*p >= '0' && *p <= '9')
			p++;
	else
		return false;
	if (*p == '.')
	{
		integral = false;
		p++;
		if (!(*p >= '0' && *p <= '9'))
			return false;
		while (*p >= '0' && *p <= '9')
			p++;
	}
	if (*p == 'e' || *p == 'E')
	{
		integral = false;
		p++;
		if (*p == '+' || *p == '-')
			p++;
		if (!(*p >= '0' && *p <= '9'))
			return false;
		while (*p >= '0' && *p <= '9')
			p++;
	}
	c->s = p;
	if (v == NULL)
		return true;
	if (!integral)
		return false;
	{
		char	   *end;
		long long	x;

		errno = 0;
		x = strtoll(start, &end, 10);
		if (errno == ERANGE || end != p)
			return false;
		*v = (int64_t) x;
	}
	return true;
}

static bool skip_value(cursor *c, int depth);

/* Skip an object or array at the cursor (at its opening bracket). */
static bool
skip_container(cursor *c, int depth)
{
	char		close = *c->s == '{' ? '}' : ']';
	bool		object = *c->s == '{';
	bool		first = true;

	if (depth >= LE_NOTE_MAX_DEPTH)
		return false;
	c->s++;
	for (;;)
	{
		skip_ws(c);
		if (*c->s == close && first)
		{
			c->s++;
			return true;
		}
		if (object)
		{
			if (!parse_string(c, NULL, 0))
				return false;
			skip_ws(c);
			if (*c->s++ != ':')
				return false;
			skip_ws(c);
		}
		if (!skip_value(c, depth + 1))
			return false;
		skip_ws(c);
		first = false;
		if (*c->s == ',')
		{
			c->s++;
			continue;
		}
		if (*c->s == close)
		{
			c->s++;
			return true;
		}
		return false;
	}
}

/* Skip any JSON value at the cursor. */
static bool
skip_value(cursor *c, int depth)
{
	switch (*c->s)
	{
		case '"':
			return parse_string(c, NULL, 0);
		case '{':
		case '[':
			return skip_container(c, depth);
		case 't':
			if (strncmp(c->s, "true", 4) != 0)
				return false;
			c->s += 4;
			return true;
		case 'f':
			if (strncmp(c->s, "false", 5) != 0)
				return false;
			c->s += 5;
			return true;
		case 'n':
			if (strncmp(c->s, "null", 4) != 0)
				return false;
			c->s += 4;
			return true;
		default:
			return parse_number(c, NULL);
	}
}

/* Is the cursor at the literal null?  Consumes it if so. */
static bool
take_null(cursor *c)
{
	if (strncmp(c->s, "null", 4) != 0)
		return false;
	c->s += 4;
	return true;
}

/* Parse one member "key": value into n. */
static bool
parse_member(cursor *c, le_note *n)
{
	char		key[32];
	cursor		save;

	save = *c;
	if (!parse_string(c, key, sizeof(key)))
	{
		/* a key too long for us is not one of ours: skip the member */
		*c = save;
		if (!parse_string(c, NULL, 0))
			return false;
		key[0] = '\0';
	}
	skip_ws(c);
	if (*c->s++ != ':')
		return false;
	skip_ws(c);
	if (strcmp(key, "event") == 0)
		return parse_string(c, n->event, sizeof(n->event));
	if (strcmp(key, "lease_key") == 0)
		return parse_string(c, n->lease_key, sizeof(n->lease_key));
	if (strcmp(key, "expires_at") == 0)
		return take_null(c) || parse_string(c, n->expires_at, sizeof(n->expires_at));
	if (strcmp(key, "holder") == 0)
	{
		n->has_holder = false;
		n->holder[0] = '\0';
		if (take_null(c))
			return true;
		if (!parse_string(c, n->holder, sizeof(n->holder)))
			return false;
		n->has_holder = true;
		return true;
	}
	if (strcmp(key, "fencing_token") == 0)
	{
		n->has_token = false;
		if (take_null(c))
			return true;
		if (!parse_number(c, &n->token))
			return false;
		n->has_token = true;
		return true;
	}
	return skip_value(c, 0);
}

/* Parse a payload (see le_notify.h). */
bool
le_parse_note(const char *payload, le_note *n)
{
	cursor		c = {payload};
	bool		first = true;

	memset(n, 0, sizeof(*n));
	if (payload == NULL)
		return false;
	skip_ws(&c);
	if (*c.s++ != '{')
		goto bad;
	for (;;)
	{
		skip_ws(&c);
		if (*c.s == '}' && first)
		{
			c.s++;
			break;
		}
		if (!parse_member(&c, n))
			goto bad;
		first = false;
		skip_ws(&c);
		if (*c.s == ',')
		{
			c.s++;
			continue;
		}
		if (*c.s == '}')
		{
			c.s++;
			break;
		}
		goto bad;
	}
	skip_ws(&c);
	if (*c.s != '\0' || n->event[0] == '\0' || n->lease_key[0] == '\0')
		goto bad;
	return true;

bad:
	memset(n, 0, sizeof(*n));
	return false;
}
