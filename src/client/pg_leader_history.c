/*-------------------------------------------------------------------------
 *
 * pg_leader_history.c
 *		"pg_leader history": the ownership periods of leases from
 *		le_lease_history and le_leases, as a table, JSON or a hand-written
 *		SVG timeline (one lane per holder, a bar per period labelled with
 *		its token, its end marked by kind, a time axis, a legend).
 *		"pg_leader watch": one line per change of a lease as it happens.
 *
 * The invariant: every text that comes from the database is escaped for
 * where it goes (XML in the SVG, JSON strings, control characters in
 * text), and every event watch prints was read from the tables, never
 * taken from a notification's payload: a NOTIFY only makes watch look
 * sooner than its next poll (expiries send none; polls find them).
 *
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "le_client.h"
#include "pg_leader_history.h"

/* Server timestamps as YYYY-MM-DDTHH:MM:SS.mmmZ. */
#define ISO(col) "pg_catalog.to_char(pg_catalog.timezone('UTC', " col "), " \
	"'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
#define EPOCH(col) "pg_catalog.date_part('epoch', " col ")"

/* Columns of the history query. */
enum
{
	HC_KEY, HC_HOLDER, HC_TOKEN, HC_START, HC_END, HC_STATE, HC_T0, HC_T1, HC_NOW, HC_SINCE
};

/* The kinds of a period's end, with their colours and legend texts. */
static const struct
{
	const char *state;
	const char *colour;
	const char *legend;
}			kinds[] = {
	{"held", "#2ca02c", "held now (open period)"},
	{"released", "#1f77b4", "released by its holder"},
	{"expired", "#ff7f0e", "expired"},
	{"force_released", "#d62728", "force released"},
	{"unknown", "#999999", "end not recorded"},
};
#define N_KINDS (sizeof(kinds) / sizeof(kinds[0]))

/* SVG geometry (pixels). */
#define SVG_W		960
#define SVG_LEFT	200
#define SVG_RIGHT	50
#define SVG_TOP		50
#define LANE_H		40
#define BAR_Y		16			/* bar top within its lane */
#define BAR_H		18

/* Print an error and return status (after closing the connection). */
static int
lh_fail(PGconn *conn, int status, const char *what, const char *msg)
{
	fprintf(stderr, "pg_leader: error: %s%s%s\n", what, msg && msg[0] ? ": " : "", msg ? msg : "");
	if (conn)
		PQfinish(conn);
	return status;
}

/*
 * The code point of the UTF-8 sequence at s, its length in *len; -1 (and
 * *len 1) for a byte that starts no valid sequence (overlong, surrogate,
 * beyond U+10FFFF, cut short): text of a SQL_ASCII database may be any bytes.
 */
static int32_t
utf8_next(const unsigned char *s, int *len)
{
	int32_t		cp;
	int			n;

	*len = 1;
	if (s[0] < 0x80)
		return s[0];
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		n = 2, cp = s[0] & 0x1f;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		n = 3, cp = s[0] & 0x0f;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		n = 4, cp = s[0] & 0x07;
	else
		return -1;
	for (int i = 1; i < n; i++)
	{
		if ((s[i] & 0xc0) != 0x80)
			return -1;
		cp = (cp << 6) | (s[i] & 0x3f);
	}
	if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10ffff ||
		(cp >= 0xd800 && cp <= 0xdfff))
		return -1;
	*len = n;
	return cp;
}

/* Append s to f as a JSON string; invalid UTF-8 becomes U+FFFD. */
static void
lh_json(FILE *f, const char *s)
{
	const unsigned char *p = (const unsigned char *) s;
	int			len;

	fputc('"', f);
	while (*p)
	{
		int32_t		cp = utf8_next(p, &len);

		if (cp == '"' || cp == '\\')
			fprintf(f, "\\%c", (char) cp);
		else if (cp < 0)
			fputs("\\ufffd", f);
		else if (cp < 0x20 || cp == 0x7f || cp == 0x2028 || cp == 0x2029)
			fprintf(f, "\\u%04x", (unsigned) cp);
		else
			fwrite(p, 1, len, f);
		p += len;
	}
	fputc('"', f);
}

/* Does cp change how a line looks rather than show (controls, bidi)? */
static bool
invisible(int32_t cp)
{
	return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || cp == 0x061c || cp == 0x200e ||
		cp == 0x200f || (cp >= 0x2028 && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069) ||
		cp == 0xfeff;
}

/*
 * Append s to f as one field of a text line: backslash, space, '=' and
 * '"' escaped (so a value cannot pose as further fields), controls (C0,
 * C1), line and paragraph separators and bidirectional overrides as \uXXXX,
 * bytes of invalid UTF-8 as \xNN.
 */
static void
lh_text(FILE *f, const char *s)
{
	const unsigned char *p = (const unsigned char *) s;
	int			len;

	while (*p)
	{
		int32_t		cp = utf8_next(p, &len);

		if (cp == '\\')
			fputs("\\\\", f);
		else if (cp < 0)
			fprintf(f, "\\x%02x", *p);
		else if (cp == ' ' || cp == '=' || cp == '"' || invisible(cp))
			fprintf(f, cp < 0x80 ? "\\x%02x" : "\\u%04x", (unsigned) cp);
		else
			fwrite(p, 1, len, f);
		p += len;
	}
}

/*
 * Append s to f escaped for XML text and attribute values: the five
 * markup characters as entities; tab, newline and return as character
 * references (an attribute value would turn them into spaces); characters
 * XML 1.0 forbids (other controls, U+FFFE, U+FFFF) and bytes of invalid
 * UTF-8 as "?".
 */
static void
lh_xml(FILE *f, const char *s)
{
	const unsigned char *p = (const unsigned char *) s;
	int			len;

	while (*p)
	{
		int32_t		cp = utf8_next(p, &len);

		if (cp == '&')
			fputs("&amp;", f);
		else if (cp == '<')
			fputs("&lt;", f);
		else if (cp == '>')
			fputs("&gt;", f);
		else if (cp == '"')
			fputs("&quot;", f);
		else if (cp == '\'')
			fputs("&apos;", f);
		else if (cp == '\t' || cp == '\n' || cp == '\r')
			fprintf(f, "&#%d;", (int) cp);
		else if (cp < 0x20 || cp == 0x7f || cp == 0xfffe || cp == 0xffff)
			fputc('?', f);
		else
			fwrite(p, 1, len, f);
		p += len;
	}
}

/* The index of a state in kinds (unknown for anything else). */
static int
kind_of(const char *state)
{
	for (size_t i = 0; i < N_KINDS; i++)
		if (strcmp(kinds[i].state, state) == 0)
			return (int) i;
	return N_KINDS - 1;
}

/*
 * UTC time t (epoch seconds) as text with the precision a tick step needs;
 * "?" for a time gmtime cannot split (not finite, or beyond its years).
 */
static void
format_time(double t, double step, char *buf, size_t len)
{
	time_t		sec;
	int			ms;
	struct tm	tm;
	char		base[32];
	const char *fmt = step >= 86400 ? "%m-%d" : step >= 60 ? "%H:%M" : "%H:%M:%S";

	snprintf(buf, len, "?");
	if (!isfinite(t) || fabs(t) > 1e15)
		return;
	sec = (time_t) floor(t);
	ms = (int) floor((t - (double) sec) * 1000 + 0.5);
	if (ms >= 1000)
	{
		sec++;
		ms -= 1000;
	}
	if (gmtime_r(&sec, &tm) == NULL || strftime(base, sizeof(base), fmt, &tm) == 0)
		return;
	if (step >= 1)
		snprintf(buf, len, "%s", base);
	else
		snprintf(buf, len, "%s.%03d", base, ms);
}

/* A tick step (seconds) giving at most 8 ticks over span. */
static double
tick_step(double span)
{
	static const double steps[] = {
		0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30,
		60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400,
		172800, 604800
	};

	for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++)
		if (span / steps[i] <= 8)
			return steps[i];
	return ceil(span / 8 / 86400) * 86400;
}

/*
 * The lanes of the timeline: distinct (key, holder) in order of first
 * period, at most MAX_LANES; beyond, the last lane holds every other
 * holder's periods (an SVG taller than renderers draw helps nobody).
 */
#define MAX_LANES	200
typedef struct lanes
{
	int			n;
	int		   *of_row;			/* lane of each row */
	int		   *first_row;		/* a row of each lane */
	int			others;			/* holders merged into the last lane, or 0 */
	bool		many_keys;
} lanes;

/* Order rows by key, holder, row number (qsort_r). */
static int
row_cmp(const void *a, const void *b, void *arg)
{
	PGresult   *r = arg;
	int			i = *(const int *) a,
				j = *(const int *) b;
	int			c = strcmp(PQgetvalue(r, i, HC_KEY), PQgetvalue(r, j, HC_KEY));

	if (c == 0)
		c = strcmp(PQgetvalue(r, i, HC_HOLDER), PQgetvalue(r, j, HC_HOLDER));
	return c != 0 ? c : (i > j) - (i < j);
}

/* Order groups by their first row (qsort_r; arg: first row of each group). */
static int
group_cmp(const void *a, const void *b, void *arg)
{
	const int  *first = arg;
	int			i = first[*(const int *) a],
				j = first[*(const int *) b];

	return (i > j) - (i < j);
}

/* Assign each row of r its lane, in O(n log n); false when out of memory. */
static bool
assign_lanes(PGresult *r, lanes *ln)
{
	int			rows = PQntuples(r);
	int		   *idx = calloc(rows + 1, sizeof(int));
	int		   *ord = calloc(rows + 1, sizeof(int));
	int		   *lane_of = calloc(rows + 1, sizeof(int));
	int			groups = 0;
	bool		ok;

	memset(ln, 0, sizeof(*ln));
	ln->of_row = calloc(rows + 1, sizeof(int));
	ln->first_row = calloc(rows + 1, sizeof(int));
	ok = idx && ord && lane_of && ln->of_row && ln->first_row;
	for (int i = 0; ok && i < rows; i++)
	{
		idx[i] = i;
		if (strcmp(PQgetvalue(r, i, HC_KEY), PQgetvalue(r, 0, HC_KEY)) != 0)
			ln->many_keys = true;
	}
	if (ok)
		qsort_r(idx, rows, sizeof(int), row_cmp, r);
	/* groups of equal (key, holder): first_row[g] is each one's first row */
	for (int k = 0; ok && k < rows; k++)
	{
		if (k == 0 ||
			strcmp(PQgetvalue(r, idx[k - 1], HC_HOLDER), PQgetvalue(r, idx[k], HC_HOLDER)) != 0 ||
			strcmp(PQgetvalue(r, idx[k - 1], HC_KEY), PQgetvalue(r, idx[k], HC_KEY)) != 0)
			ln->first_row[groups++] = idx[k];
		ln->of_row[idx[k]] = groups - 1;
	}
	for (int g = 0; ok && g < groups; g++)
		ord[g] = g;
	if (ok)
		qsort_r(ord, groups, sizeof(int), group_cmp, ln->first_row);
	for (int k = 0; ok && k < groups; k++)
		lane_of[ord[k]] = k < MAX_LANES ? k : MAX_LANES - 1;
	for (int i = 0; ok && i < rows; i++)
		ln->of_row[i] = lane_of[ln->of_row[i]];
	for (int k = 0; ok && k < groups && k < MAX_LANES; k++)
		idx[k] = ln->first_row[ord[k]];
	if (ok)
		memcpy(ln->first_row, idx, sizeof(int) * (groups < MAX_LANES ? groups : MAX_LANES));
	ln->n = groups < MAX_LANES ? groups : MAX_LANES;
	ln->others = groups > MAX_LANES ? groups - MAX_LANES + 1 : 0;
	free(idx);
	free(ord);
	free(lane_of);
	return ok;
}

/* The time range of the drawing. */
typedef struct span
{
	double		t0,
				t1;
} span;

/* x of time t. */
static double
x_of(const span *s, double t)
{
	double		x = SVG_LEFT + (t - s->t0) / (s->t1 - s->t0) * (SVG_W - SVG_LEFT - SVG_RIGHT);

	if (x < SVG_LEFT)
		x = SVG_LEFT;
	if (x > SVG_W - SVG_RIGHT)
		x = SVG_W - SVG_RIGHT;
	return x;
}

/* The marker of a period's end at x, y (the bar's top): one shape per kind. */
static void
svg_marker(FILE *f, int kind, double x, double y)
{
	const char *k = kinds[kind].state;

	if (strcmp(k, "released") == 0)
		fprintf(f, "<line class=\"marker\" data-kind=\"released\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" "
				"y2=\"%.1f\" stroke=\"#222\" stroke-width=\"3\"/>\n", x, y - 3, x, y + BAR_H + 3);
	else if (strcmp(k, "expired") == 0)
		fprintf(f, "<path class=\"marker\" data-kind=\"expired\" d=\"M%.1f %.1f l8 8 m0 -8 l-8 8\" "
				"stroke=\"#222\" stroke-width=\"2\" fill=\"none\"/>\n", x - 4, y + BAR_H / 2.0 - 4);
	else if (strcmp(k, "force_released") == 0)
		fprintf(f, "<path class=\"marker\" data-kind=\"force_released\" d=\"M%.1f %.1f l10 0 l-5 8 z\" "
				"fill=\"#222\"/>\n", x - 5, y - 9);
	else if (strcmp(k, "held") == 0)
		fprintf(f, "<path class=\"marker\" data-kind=\"held\" d=\"M%.1f %.1f l7 %.1f l-7 %.1f z\" "
				"fill=\"#2ca02c\"/>\n", x, y, BAR_H / 2.0, BAR_H / 2.0);
}

/* The time axis below the lanes at y, with its ticks and labels. */
static void
svg_axis(FILE *f, const span *s, double y)
{
	double		step = tick_step(s->t1 - s->t0);
	char		a[48],
				b[48];

	fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#222\"/>\n",
			SVG_LEFT, y, SVG_W - SVG_RIGHT, y);
	for (double t = ceil(s->t0 / step) * step; t <= s->t1 + 1e-9; t += step)
	{
		double		x = x_of(s, t);
		char		label[48];

		format_time(t, step, label, sizeof(label));
		fprintf(f, "<line class=\"tick\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#222\"/>\n",
				x, y, x, y + 5);
		fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", x, y + 18, label);
	}
	format_time(s->t0, 0.001, a, sizeof(a));
	format_time(s->t1, 0.001, b, sizeof(b));
	{
		time_t		d = (time_t) floor(s->t0);
		struct tm	tm;
		char		day[32] = "?";

		if (gmtime_r(&d, &tm) == NULL || strftime(day, sizeof(day), "%Y-%m-%d", &tm) == 0)
			snprintf(day, sizeof(day), "?");
		fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"middle\">time (UTC), %s %s to %s</text>\n",
				(SVG_LEFT + SVG_W - SVG_RIGHT) / 2, y + 36, day, a, b);
	}
}

/* The legend at y: a swatch and its marker for every kind of end. */
static void
svg_legend(FILE *f, double y)
{
	double		x = 20;

	for (size_t i = 0; i < N_KINDS; i++)
	{
		fprintf(f, "<rect class=\"legend\" data-kind=\"%s\" x=\"%.1f\" y=\"%.1f\" width=\"28\" "
				"height=\"%d\" fill=\"%s\"/>\n", kinds[i].state, x, y, BAR_H, kinds[i].colour);
		svg_marker(f, (int) i, x + 28, y);
		fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">%s</text>\n", x + 40, y + 13, kinds[i].legend);
		x += 40 + 7.0 * strlen(kinds[i].legend) + 24;
	}
}

/* One bar of row i in its lane, with its token above it and its end marker. */
static void
svg_bar(FILE *f, PGresult *r, int i, const lanes *ln, const span *s)
{
	int			kind = kind_of(PQgetvalue(r, i, HC_STATE));
	double		top = SVG_TOP + ln->of_row[i] * LANE_H + BAR_Y;
	double		x0 = x_of(s, atof(PQgetvalue(r, i, HC_T0)));
	double		x1 = x_of(s, atof(PQgetvalue(r, i, HC_T1)));

	if (x1 - x0 < 2)
		x1 = x0 + 2;
	fprintf(f, "<rect class=\"period\" data-key=\"");
	lh_xml(f, PQgetvalue(r, i, HC_KEY));
	fprintf(f, "\" data-holder=\"");
	lh_xml(f, PQgetvalue(r, i, HC_HOLDER));
	fprintf(f, "\" data-token=\"%s\" data-state=\"%s\" data-lane=\"%d\" data-start=\"%s\" data-end=\"%s\" "
			"x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%d\" fill=\"%s\">",
			PQgetvalue(r, i, HC_TOKEN), kinds[kind].state, ln->of_row[i],
			PQgetvalue(r, i, HC_START), PQgetisnull(r, i, HC_END) ? "" : PQgetvalue(r, i, HC_END),
			x0, top, x1 - x0, BAR_H, kinds[kind].colour);
	fprintf(f, "<title>");
	lh_xml(f, PQgetvalue(r, i, HC_HOLDER));
	fprintf(f, ": token %s, %s to %s (%s)</title></rect>\n", PQgetvalue(r, i, HC_TOKEN),
			PQgetvalue(r, i, HC_START), PQgetisnull(r, i, HC_END) ? "now" : PQgetvalue(r, i, HC_END),
			kinds[kind].state);
	fprintf(f, "<text class=\"token\" x=\"%.1f\" y=\"%.1f\">%s</text>\n", x0 + 2, top - 4,
			PQgetvalue(r, i, HC_TOKEN));
	svg_marker(f, kind, x1, top);
}

/* The time range: from --since (or the first period) to now. */
static void
svg_span(PGresult *r, span *s)
{
	int			rows = PQntuples(r);

	s->t1 = rows > 0 ? atof(PQgetvalue(r, 0, HC_NOW)) : (double) time(NULL);
	s->t0 = s->t1 - 60;
	if (rows > 0 && !PQgetisnull(r, 0, HC_SINCE))
		s->t0 = atof(PQgetvalue(r, 0, HC_SINCE));
	else
		for (int i = 0; i < rows; i++)
			if (i == 0 || atof(PQgetvalue(r, i, HC_T0)) < s->t0)
				s->t0 = atof(PQgetvalue(r, i, HC_T0));
	/* --since is finite (check_since); years before 1 stay out of gmtime's way */
	if (!isfinite(s->t0) || s->t0 < -62135596800.0)
		s->t0 = -62135596800.0;
	if (!isfinite(s->t1) || s->t1 < s->t0 + 0.01)
		s->t1 = s->t0 + 0.01;
	/* a little room after now for the open period's marker, at most a day */
	s->t1 += fmin((s->t1 - s->t0) * 0.02, 86400);
}

/* Lane l: its band and its label (the holder; the key too when several). */
static void
svg_lane(FILE *f, PGresult *r, const lanes *ln, int l)
{
	int			fr = ln->first_row[l];
	double		top = SVG_TOP + l * LANE_H;
	bool		others = ln->others > 0 && l == ln->n - 1;

	fprintf(f, "<rect class=\"lane\" data-lane=\"%d\" data-holder=\"", l);
	if (!others)
		lh_xml(f, PQgetvalue(r, fr, HC_HOLDER));
	fprintf(f, "\" x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%d\" fill=\"%s\"/>\n", SVG_LEFT, top,
			SVG_W - SVG_LEFT - SVG_RIGHT, LANE_H, l % 2 ? "#ffffff" : "#f2f2f2");
	fprintf(f, "<text class=\"holder\" x=\"%d\" y=\"%.1f\" text-anchor=\"end\">", SVG_LEFT - 8,
			top + BAR_Y + 13);
	if (others)
		fprintf(f, "%d others in one lane", ln->others);
	else
	{
		if (ln->many_keys)
		{
			lh_xml(f, PQgetvalue(r, fr, HC_KEY));
			fputs(": ", f);
		}
		lh_xml(f, PQgetvalue(r, fr, HC_HOLDER));
	}
	fprintf(f, "</text>\n");
}

/* Write the SVG timeline of the rows of r to path; false on an error (errno). */
static bool
write_svg(PGresult *r, const char *path, const char *title)
{
	lanes		ln;
	span		s;
	FILE	   *f;
	double		axis_y;
	int			height;
	bool		ok;

	if (!assign_lanes(r, &ln))
		return false;
	svg_span(r, &s);
	axis_y = SVG_TOP + (ln.n > 0 ? ln.n : 1) * LANE_H + 10;
	height = (int) axis_y + 90;
	f = fopen(path, "w");
	if (f == NULL)
	{
		free(ln.of_row);
		free(ln.first_row);
		return false;
	}
	fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
			"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
			"font-family=\"DejaVu Sans, Verdana, sans-serif\" font-size=\"12\" data-lanes=\"%d\" "
			"data-others=\"%d\" data-periods=\"%d\" data-t0=\"%.3f\" data-t1=\"%.3f\" data-left=\"%d\" data-right=\"%d\">\n",
			SVG_W, height, SVG_W, height, ln.n, ln.others, PQntuples(r), s.t0, s.t1, SVG_LEFT, SVG_W - SVG_RIGHT);
	fprintf(f, "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n", SVG_W, height);
	fprintf(f, "<text x=\"20\" y=\"28\" font-size=\"16\" font-weight=\"bold\">");
	lh_xml(f, title);
	fprintf(f, "</text>\n");
	for (int l = 0; l < ln.n; l++)
		svg_lane(f, r, &ln, l);
	for (int i = 0; i < PQntuples(r); i++)
		svg_bar(f, r, i, &ln, &s);
	svg_axis(f, &s, axis_y);
	svg_legend(f, axis_y + 54);
	fprintf(f, "</svg>\n");
	free(ln.of_row);
	free(ln.first_row);
	ok = !ferror(f);
	return fclose(f) == 0 && ok;
}

/* Print the periods as a table or JSON. */
static void
print_periods(PGresult *r, bool json)
{
	int			rows = PQntuples(r);

	if (json)
	{
		printf("[");
		for (int i = 0; i < rows; i++)
		{
			printf("%s{\"lease_key\":", i ? "," : "");
			lh_json(stdout, PQgetvalue(r, i, HC_KEY));
			printf(",\"holder\":");
			lh_json(stdout, PQgetvalue(r, i, HC_HOLDER));
			printf(",\"fencing_token\":%s,\"acquired_at\":\"%s\",\"ended_at\":", PQgetvalue(r, i, HC_TOKEN),
				   PQgetvalue(r, i, HC_START));
			if (PQgetisnull(r, i, HC_END))
				printf("null");
			else
				printf("\"%s\"", PQgetvalue(r, i, HC_END));
			printf(",\"state\":\"%s\",\"seconds\":%.3f}", PQgetvalue(r, i, HC_STATE),
				   atof(PQgetvalue(r, i, HC_T1)) - atof(PQgetvalue(r, i, HC_T0)));
		}
		printf("]\n");
		return;
	}
	printf("%-20s %-24s %20s %-24s %-24s %-14s %10s\n", "lease_key", "holder", "token", "acquired_at",
		   "ended_at", "end", "seconds");
	for (int i = 0; i < rows; i++)
	{
		char	   *key = NULL,
				   *holder = NULL;
		size_t		n;
		FILE	   *m;

		if ((m = open_memstream(&key, &n)) != NULL)
		{
			lh_text(m, PQgetvalue(r, i, HC_KEY));
			fclose(m);
		}
		if ((m = open_memstream(&holder, &n)) != NULL)
		{
			lh_text(m, PQgetvalue(r, i, HC_HOLDER));
			fclose(m);
		}
		printf("%-20s %-24s %20s %-24s %-24s %-14s %10.3f\n", key ? key : "?", holder ? holder : "?",
			   PQgetvalue(r, i, HC_TOKEN), PQgetvalue(r, i, HC_START),
			   PQgetisnull(r, i, HC_END) ? "-" : PQgetvalue(r, i, HC_END), PQgetvalue(r, i, HC_STATE),
			   atof(PQgetvalue(r, i, HC_T1)) - atof(PQgetvalue(r, i, HC_T0)));
		free(key);
		free(holder);
	}
}

/*
 * Check --since (a duration ago, or a timestamp) on the server: an error
 * of data (22xxx), or a time that is not finite, is a usage error.  Fills
 * params[1] (an interval) or params[2] (a timestamp).  Returns 0 or the
 * exit status (the connection then closed).
 */
static int
check_since(const lh_options *o, const char **params, char *since_iv, size_t len)
{
	char		err[1024];
	int64_t		ms;
	PGresult   *r;
	const char *st;
	bool		finite;

	if (o->since == NULL)
		return 0;
	if (le_parse_duration_ms(o->since, &ms))
	{
		snprintf(since_iv, len, "%" PRId64 " milliseconds", ms);
		params[1] = since_iv;
	}
	else
		params[2] = o->since;
	r = le_exec(o->conn, "SELECT pg_catalog.isfinite(COALESCE($2::pg_catalog.timestamptz, "
				"pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) $1::pg_catalog.interval))",
				2, params + 1, o->timeout_ms, err, sizeof(err), NULL);
	if (r == NULL)
		return lh_fail(o->conn, LH_EXIT_CONNECT, "--since", err[0] ? err : "no answer in time");
	st = PQresultErrorField(r, PG_DIAG_SQLSTATE);
	if (PQresultStatus(r) != PGRES_TUPLES_OK && !(st && strncmp(st, "22", 2) == 0))
	{
		PQclear(r);
		return lh_fail(o->conn, LH_EXIT_CONNECT, "--since", err);
	}
	finite = PQresultStatus(r) == PGRES_TUPLES_OK && strcmp(PQgetvalue(r, 0, 0), "t") == 0;
	PQclear(r);
	if (!finite)
		return lh_fail(o->conn, LH_EXIT_USAGE,
					   "invalid --since (a duration such as 10m, or a finite timestamp)", err);
	return 0;
}

/*
 * Ask for UTF-8 whatever PGCLIENTENCODING says: JSON and SVG are UTF-8.  A
 * SQL_ASCII database converts nothing and refuses bytes that are not UTF-8
 * on the way out to a UTF-8 client: there the bytes come as they are, and
 * the writers replace what is not UTF-8.
 */
static int
set_utf8(const lh_options *o)
{
	const char *server = PQparameterStatus(o->conn, "server_encoding");
	const char *enc = server && strcmp(server, "SQL_ASCII") == 0 ? "SQL_ASCII" : "UTF8";

	if (PQsetClientEncoding(o->conn, enc) != 0)
		return lh_fail(o->conn, LH_EXIT_CONNECT, "client encoding", PQerrorMessage(o->conn));
	return 0;
}

/*
 * pg_leader history: every period of le_lease_history (of one key with
 * -l) that ended at or after --since, plus the current period of
 * le_leases when the history lacks it (leader_election.history = off).  A
 * period still open in the history ends: never while its lease row holds
 * it and is valid (state held), at the row's expiry when that passed
 * (expired: the next grant records it so), else (a gap in the history) at
 * the next period's start (unknown).
 */
int
lh_history(const lh_options *o)
{
	char		sql[4096];
	char		since_iv[64] = "";
	const char *params[3] = {o->lease, NULL, NULL};
	char		err[1024];
	PGresult   *r;
	const char *S = o->schema_q;
	int			rc;

	if ((rc = set_utf8(o)) != 0 || (rc = check_since(o, params, since_iv, sizeof(since_iv))) != 0)
		return rc;
	snprintf(sql, sizeof(sql),
			 "WITH s AS (SELECT pg_catalog.clock_timestamp() AS now, "
			 "  COALESCE($3::pg_catalog.timestamptz, pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) $2::pg_catalog.interval) AS since), "
			 "p AS (SELECT h.lease_key, h.holder, h.fencing_token, h.acquired_at, h.ended_at, h.end_reason "
			 "  FROM %s.le_lease_history h WHERE $1::pg_catalog.text IS NULL OR h.lease_key OPERATOR(pg_catalog.=) $1 "
			 " UNION ALL SELECT l.lease_key, l.holder, l.fencing_token, l.acquired_at, NULL, NULL "
			 "  FROM %s.le_leases l WHERE l.holder IS NOT NULL "
			 "   AND ($1::pg_catalog.text IS NULL OR l.lease_key OPERATOR(pg_catalog.=) $1) "
			 "   AND NOT EXISTS (SELECT FROM %s.le_lease_history x WHERE x.lease_key OPERATOR(pg_catalog.=) l.lease_key "
			 "    AND x.fencing_token OPERATOR(pg_catalog.=) l.fencing_token)), "
			 "q AS (SELECT p.*, l.holder AS cur_holder, l.fencing_token AS cur_token, l.expires_at AS cur_expires, "
			 "  l.is_valid, pg_catalog.lead(p.acquired_at) OVER (PARTITION BY p.lease_key ORDER BY p.fencing_token) AS next_at "
			 "  FROM p LEFT JOIN %s.le_leases l ON l.lease_key OPERATOR(pg_catalog.=) p.lease_key), "
			 "r AS (SELECT q.*, CASE WHEN ended_at IS NOT NULL THEN end_reason "
			 "  WHEN cur_token OPERATOR(pg_catalog.=) fencing_token AND cur_holder IS NOT NULL AND is_valid THEN 'held' "
			 "  WHEN cur_token OPERATOR(pg_catalog.=) fencing_token AND cur_holder IS NOT NULL THEN 'expired' "
			 "  ELSE 'unknown' END AS state, "
			 " CASE WHEN ended_at IS NOT NULL THEN ended_at "
			 "  WHEN cur_token OPERATOR(pg_catalog.=) fencing_token AND cur_holder IS NOT NULL AND is_valid THEN NULL "
			 "  WHEN cur_token OPERATOR(pg_catalog.=) fencing_token AND cur_holder IS NOT NULL THEN cur_expires "
			 "  ELSE COALESCE(next_at, acquired_at) END AS end_at FROM q) "
			 "SELECT r.lease_key, r.holder, r.fencing_token, " ISO("r.acquired_at") ", " ISO("r.end_at") ", "
			 " r.state, " EPOCH("r.acquired_at") ", " EPOCH("COALESCE(r.end_at, s.now)") ", "
			 EPOCH("s.now") ", " EPOCH("s.since")
			 " FROM r, s WHERE s.since IS NULL OR r.end_at IS NULL OR r.end_at OPERATOR(pg_catalog.>=) s.since "
			 "ORDER BY r.lease_key, r.fencing_token", S, S, S, S);
	r = le_exec(o->conn, sql, 3, params, o->timeout_ms, err, sizeof(err), NULL);
	if (r == NULL)
		return lh_fail(o->conn, LH_EXIT_CONNECT, "history query", err[0] ? err : "no answer in time");
	if (PQresultStatus(r) != PGRES_TUPLES_OK)
	{
		PQclear(r);
		return lh_fail(o->conn, LH_EXIT_CONNECT, "history query", err);
	}
	PQfinish(o->conn);
	if (o->svg)
	{
		char		title[512];

		snprintf(title, sizeof(title), "leader_election: ownership of %s%s%s", o->lease ? "lease \"" : "every lease",
				 o->lease ? o->lease : "", o->lease ? "\"" : "");
		if (!write_svg(r, o->svg, title))
		{
			int			save = errno;

			PQclear(r);
			fprintf(stderr, "pg_leader: error: could not write \"%s\": %s\n", o->svg, strerror(save));
			return LH_EXIT_INTERNAL;
		}
	}
	else
		print_periods(r, o->json);
	PQclear(r);
	return 0;
}

/*
 * pg_leader watch.  Each poll (and each notification, which only makes it
 * look sooner) reads le_leases and compares every lease with what it saw
 * before; a changed token or holder is explained from le_lease_history.
 */
static volatile sig_atomic_t watch_stop = 0;
static int	watch_pipe[2] = {-1, -1};
static int	watch_out_errno = 0;	/* stdout failed: watch ends */

/* SIGINT/SIGTERM: end watch. */
static void
watch_on_signal(int sig)
{
	int			save = errno;
	char		c = 1;
	ssize_t		rc;

	(void) sig;
	watch_stop = 1;
	rc = write(watch_pipe[1], &c, 1);
	(void) rc;
	errno = save;
}

/* What watch last saw of one lease. */
typedef struct wlease
{
	char	   *key;
	char	   *holder;			/* NULL: free */
	int64_t		token;
	char	   *expires;		/* ISO, NULL when free */
	bool		valid;
	bool		end_told;		/* the end of period token was printed */
	bool		watched;		/* le_watch succeeded */
} wlease;

typedef struct wstate
{
	const lh_options *o;
	wlease	   *l;				/* in strcmp order of key */
	int			n,
				cap,
				cur;			/* watch_find's place in l */
	bool		first;			/* the first snapshot: a baseline, no events */
	bool		watch_failed;	/* le_watch refused: told once */
	int64_t		watch_retry_at; /* monotonic ms: try le_watch again then */
	int64_t		last_snapshot;	/* monotonic ms of the last one */
} wstate;

/* One event line (text or JSON) on stdout, flushed. */
static void
watch_event(const wstate *w, const char *event, const char *key, int64_t token,
			const char *holder, const char *ts, const char *expires)
{
	if (w->o->json)
	{
		printf("{\"ts\":\"%s\",\"event\":\"%s\",\"lease_key\":", ts, event);
		lh_json(stdout, key);
		printf(",\"fencing_token\":%" PRId64 ",\"holder\":", token);
		if (holder)
			lh_json(stdout, holder);
		else
			printf("null");
		if (expires)
			printf(",\"expires_at\":\"%s\"}\n", expires);
		else
			printf(",\"expires_at\":null}\n");
	}
	else
	{
		printf("%s %s key=", ts, event);
		lh_text(stdout, key);
		printf(" token=%" PRId64, token);
		if (holder)
		{
			printf(" holder=");
			lh_text(stdout, holder);
		}
		if (expires)
			printf(" expires=%s", expires);
		putchar('\n');
	}
	/* a reader that went away (EPIPE: SIGPIPE is ignored) ends watch */
	if ((fflush(stdout) != 0 || ferror(stdout)) && watch_out_errno == 0)
	{
		watch_out_errno = errno ? errno : EIO;
		watch_stop = 1;
	}
}

/*
 * Print the periods of key with tokens from..to (inclusive) from the
 * history: grants of those after from, and ends of those that ended
 * (from's only when not told yet).  A period from that the history lacks
 * (leader_election.history = off) and that we saw held is told "ended", at
 * its expiry or the next grant, whichever came first, else at now_ts.
 * to_expires: the expiry of period to when it is current (its grant says
 * so), else NULL.
 * *found: the history has period to; *ended: it has ended.  Returns false
 * when the query failed.
 */
static bool
watch_explain(wstate *w, wlease *l, int64_t from, int64_t to, const char *now_ts,
			  const char *to_expires, bool *found, bool *ended)
{
	char		sql[1024];
	char		a[32],
				b[32],
				err[1024];
	const char *params[3] = {l->key, a, b};
	PGresult   *r;

	snprintf(a, sizeof(a), "%" PRId64, from);
	snprintf(b, sizeof(b), "%" PRId64, to);
	snprintf(sql, sizeof(sql),
			 "SELECT fencing_token, holder, " ISO("acquired_at") ", " ISO("ended_at") ", end_reason "
			 "FROM %s.le_lease_history WHERE lease_key OPERATOR(pg_catalog.=) $1 "
			 "AND fencing_token OPERATOR(pg_catalog.>=) $2::pg_catalog.int8 "
			 "AND fencing_token OPERATOR(pg_catalog.<=) $3::pg_catalog.int8 ORDER BY fencing_token",
			 w->o->schema_q);
	r = le_exec(w->o->conn, sql, 3, params, w->o->timeout_ms, err, sizeof(err), NULL);
	if (r == NULL || PQresultStatus(r) != PGRES_TUPLES_OK)
	{
		fprintf(stderr, "pg_leader: error: history query: %s\n", err[0] ? err : "no answer in time");
		PQclear(r);
		return false;
	}
	*found = *ended = false;
	if (from > 0 && l->holder != NULL && !l->end_told &&
		(PQntuples(r) == 0 || strtoll(PQgetvalue(r, 0, 0), NULL, 10) != from))
	{
		const char *by = PQntuples(r) > 0 ? PQgetvalue(r, 0, 2) : now_ts;

		if (l->expires != NULL && strcmp(l->expires, by) < 0)
			by = l->expires;
		watch_event(w, "ended", l->key, from, l->holder, by, NULL);
	}
	for (int i = 0; i < PQntuples(r); i++)
	{
		int64_t		t = strtoll(PQgetvalue(r, i, 0), NULL, 10);

		if (t == to)
			*found = true;
		if (t > from)
			watch_event(w, "granted", l->key, t, PQgetvalue(r, i, 1), PQgetvalue(r, i, 2),
						t == to && PQgetisnull(r, i, 3) ? to_expires : NULL);
		if (PQgetisnull(r, i, 3))
			continue;
		if (t == to)
			*ended = true;
		if (t != from || !l->end_told)
			watch_event(w, PQgetvalue(r, i, 4), l->key, t, PQgetvalue(r, i, 1), PQgetvalue(r, i, 3), NULL);
	}
	PQclear(r);
	return true;
}

/*
 * le_watch(key) on our connection, so its releases wake us at once.  Only
 * with -l: a watch holds a session-level lock until the session ends, so
 * watching every lease would take one lock per lease of the cluster's shared
 * lock table (enough leases exhaust it, and then every other session fails
 * with "out of shared memory").  Without -l, watch polls; notifications of
 * leases other sessions watch still wake it (it LISTENs).  A refusal is told
 * once and tried again WATCH_RETRY_MS later.
 */
#define WATCH_RETRY_MS	30000
static void
watch_key(wstate *w, wlease *l)
{
	char		sql[512];
	char		err[1024];
	const char *params[1] = {l->key};
	PGresult   *r;

	if (w->o->lease == NULL || le_monotonic_ms() < w->watch_retry_at)
		return;
	snprintf(sql, sizeof(sql), "SELECT %s.le_watch($1)", w->o->schema_q);
	r = le_exec(w->o->conn, sql, 1, params, w->o->timeout_ms, err, sizeof(err), NULL);
	if (r != NULL && PQresultStatus(r) == PGRES_TUPLES_OK)
		l->watched = true;
	else
	{
		if (!w->watch_failed)
			fprintf(stderr, "pg_leader: notice: le_watch failed (%s); polling only, trying again every %ds\n",
					err[0] ? err : "no answer in time", WATCH_RETRY_MS / 1000);
		w->watch_failed = true;
		w->watch_retry_at = le_monotonic_ms() + WATCH_RETRY_MS;
	}
	PQclear(r);
}

/*
 * The lease of key in w, added (token 0, free) when new; NULL when out of
 * memory.  w->l is in strcmp order and the snapshot's rows come in the same
 * (COLLATE "C") order, so a cursor walks both at once: linear per snapshot.
 */
static wlease *
watch_find(wstate *w, const char *key)
{
	char	   *copy;

	while (w->cur < w->n && strcmp(w->l[w->cur].key, key) < 0)
		w->cur++;
	if (w->cur < w->n && strcmp(w->l[w->cur].key, key) == 0)
		return &w->l[w->cur++];
	if (w->n == w->cap)
	{
		int			cap = w->cap ? w->cap * 2 : 16;
		wlease	   *grown = realloc(w->l, cap * sizeof(wlease));

		if (grown == NULL)
			return NULL;
		w->l = grown;
		w->cap = cap;
	}
	if ((copy = strdup(key)) == NULL)
		return NULL;
	memmove(&w->l[w->cur + 1], &w->l[w->cur], (w->n - w->cur) * sizeof(wlease));
	memset(&w->l[w->cur], 0, sizeof(wlease));
	w->l[w->cur].key = copy;
	w->n++;
	return &w->l[w->cur++];
}

/* Replace *dst with a copy of src (NULL stays NULL). */
static void
set_str(char **dst, const char *src)
{
	free(*dst);
	*dst = src ? strdup(src) : NULL;
}

/*
 * Compare one row of the snapshot (holder, token, expires, valid, and the
 * server's acquired_at/renewed_at) with what we saw of its lease, and
 * print what happened in between.  False when a query failed.
 */
static bool
watch_compare(wstate *w, wlease *l, PGresult *r, int i)
{
	const char *holder = PQgetisnull(r, i, 1) ? NULL : PQgetvalue(r, i, 1);
	int64_t		token = strtoll(PQgetvalue(r, i, 2), NULL, 10);
	const char *expires = PQgetisnull(r, i, 3) ? NULL : PQgetvalue(r, i, 3);
	bool		valid = strcmp(PQgetvalue(r, i, 4), "t") == 0;
	bool		same = token == l->token;
	bool		found,
				ended;

	if (!w->first && token < l->token)
	{
		/* the extension was dropped and created again: tokens start anew */
		watch_event(w, "reset", l->key, token, holder, PQgetvalue(r, i, 7), expires);
		l->end_told = holder != NULL && !valid;
		l->watched = false;		/* a new lease row: watch it again */
	}
	else if (!w->first && token > l->token)
	{
		/* from the end of our last period to the grant of the current one */
		if (!watch_explain(w, l, l->token, token, PQgetvalue(r, i, 7), holder ? expires : NULL,
						   &found, &ended))
			return false;
		/* not recorded (leader_election.history = off): the row tells */
		if (!found && holder != NULL)
			watch_event(w, "granted", l->key, token, holder, PQgetvalue(r, i, 5), expires);
		l->end_told = ended;
		if (holder != NULL && !valid && !ended)
		{
			watch_event(w, "expired", l->key, token, holder, expires, expires);
			l->end_told = true;
		}
	}
	else if (!w->first && same && l->holder != NULL && holder == NULL)
	{
		/* released or force released: the history says which */
		if (!l->end_told && !watch_explain(w, l, token, token, PQgetvalue(r, i, 7), NULL, &found, &ended))
			return false;
		l->end_told = true;
	}
	else if (!w->first && same && holder != NULL && l->valid && !valid && !l->end_told)
	{
		watch_event(w, "expired", l->key, token, holder, expires, expires);
		l->end_told = true;
	}
	else if (!w->first && same && holder != NULL && valid && w->o->verbose &&
			 l->expires != NULL && expires != NULL && strcmp(l->expires, expires) != 0)
		watch_event(w, "renewed", l->key, token, holder, PQgetvalue(r, i, 6), expires);
	if (w->first)
		l->end_told = holder != NULL && !valid;
	l->token = token;
	l->valid = valid;
	set_str(&l->holder, holder);
	set_str(&l->expires, expires);
	return true;
}

/* Read le_leases and print the changes since the last look.  False on failure. */
static bool
watch_snapshot(wstate *w)
{
	char		sql[1024];
	char		err[1024];
	const char *params[1] = {w->o->lease};
	PGresult   *r;

	snprintf(sql, sizeof(sql),
			 "SELECT lease_key, holder, fencing_token, " ISO("expires_at") ", is_valid, "
			 ISO("acquired_at") ", " ISO("renewed_at") ", " ISO("pg_catalog.clock_timestamp()") " FROM %s.le_leases "
			 "WHERE $1::pg_catalog.text IS NULL OR lease_key OPERATOR(pg_catalog.=) $1 ORDER BY lease_key COLLATE \"C\"",
			 w->o->schema_q);
	r = le_exec(w->o->conn, sql, 1, params, w->o->timeout_ms, err, sizeof(err), NULL);
	if (r == NULL || PQresultStatus(r) != PGRES_TUPLES_OK)
	{
		fprintf(stderr, "pg_leader: error: lease query: %s\n", err[0] ? err : "no answer in time");
		PQclear(r);
		return false;
	}
	w->cur = 0;
	for (int i = 0; i < PQntuples(r); i++)
	{
		wlease	   *l = watch_find(w, PQgetvalue(r, i, 0));

		if (l == NULL)
		{
			PQclear(r);
			fprintf(stderr, "pg_leader: error: out of memory\n");
			return false;
		}
		if (!l->watched)
			watch_key(w, l);
		if (!watch_compare(w, l, r, i))
		{
			PQclear(r);
			return false;
		}
	}
	PQclear(r);
	w->first = false;
	w->last_snapshot = le_monotonic_ms();
	return true;
}

#define WATCH_MIN_GAP_MS	50

/*
 * Wait up to the poll interval for a notification or a signal.  False when
 * the connection broke.
 */
static bool
watch_wait(wstate *w)
{
	struct pollfd p[2];
	PGnotify   *nf;

	int64_t		gap;

	memset(p, 0, sizeof(p));
	p[0].fd = watch_pipe[0];
	p[0].events = POLLIN;
	p[1].fd = PQsocket(w->o->conn);
	p[1].events = POLLIN;
	/* poll() takes an int: longer intervals are cut to about 24 days */
	if (poll(p, 2, w->o->poll_ms > INT_MAX ? INT_MAX : (int) w->o->poll_ms) < 0 && errno != EINTR)
		return false;
	/* a flood of notifications brings a snapshot every WATCH_MIN_GAP_MS at most */
	gap = le_monotonic_ms() - w->last_snapshot;
	if (!(p[0].revents & POLLIN) && gap >= 0 && gap < WATCH_MIN_GAP_MS)
	{
		struct pollfd q = {watch_pipe[0], POLLIN, 0};

		(void) poll(&q, 1, (int) (WATCH_MIN_GAP_MS - gap));
		p[0].revents |= q.revents;
	}
	if (p[0].revents & POLLIN)
	{
		char		buf[16];

		while (read(watch_pipe[0], buf, sizeof(buf)) > 0)
			;
	}
	if ((p[1].revents & (POLLIN | POLLERR | POLLHUP)) && !PQconsumeInput(w->o->conn))
		return false;
	/* the payload is not read: the tables say what happened */
	while ((nf = PQnotifies(w->o->conn)) != NULL)
		PQfreemem(nf);
	return PQstatus(w->o->conn) == CONNECTION_OK;
}

/* pg_leader watch: print every change until SIGINT or SIGTERM. */
int
lh_watch(const lh_options *o)
{
	wstate		w;
	struct sigaction sa;
	char		err[1024];
	PGresult   *r;
	int			status = 0;

	memset(&w, 0, sizeof(w));
	w.o = o;
	w.first = true;
	if ((status = set_utf8(o)) != 0)
		return status;
	if (pipe2(watch_pipe, O_NONBLOCK | O_CLOEXEC) != 0)
		return lh_fail(o->conn, LH_EXIT_INTERNAL, "pipe", strerror(errno));
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = watch_on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	r = le_exec(o->conn, "LISTEN leader_election", 0, NULL, o->timeout_ms, err, sizeof(err), NULL);
	if (r == NULL || PQresultStatus(r) != PGRES_COMMAND_OK)
	{
		PQclear(r);
		return lh_fail(o->conn, LH_EXIT_CONNECT, "LISTEN", err);
	}
	PQclear(r);
	if (!watch_snapshot(&w))
		status = LH_EXIT_CONNECT;
	else
	{
		fprintf(stderr, "pg_leader: watching %s%s%s (poll every %" PRId64 "ms)\n",
				o->lease ? "lease \"" : "every lease", o->lease ? o->lease : "", o->lease ? "\"" : "",
				o->poll_ms);
		while (!watch_stop)
		{
			if (!watch_wait(&w))
			{
				fprintf(stderr, "pg_leader: error: connection lost: %s", PQerrorMessage(o->conn));
				status = LH_EXIT_CONNECT;
				break;
			}
			if (!watch_stop && !watch_snapshot(&w))
			{
				status = LH_EXIT_CONNECT;
				break;
			}
		}
	}
	PQfinish(o->conn);
	if (watch_out_errno != 0 && watch_out_errno != EPIPE)
	{
		fprintf(stderr, "pg_leader: error: could not write to standard output: %s\n",
				strerror(watch_out_errno));
		status = LH_EXIT_INTERNAL;
	}
	for (int i = 0; i < w.n; i++)
	{
		free(w.l[i].key);
		free(w.l[i].holder);
		free(w.l[i].expires);
	}
	free(w.l);
	return status;
}
