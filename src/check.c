/*-------------------------------------------------------------------------
 *
 * check.c
 *		Checks of the arguments of the extension's SQL functions.
 *
 * Every SQL-callable function validates its arguments here before it
 * touches a lease, so that bad input gets the same error, with the same
 * SQLSTATE, from every function (doc/reference.md lists them), and error
 * messages quote input values only clipped (le_check_show).
 *
 * Invariant: an argument that passed its check is non-NULL and within the
 * documented limits; nothing has been read or written before the check.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "common/int.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "leader_election.h"

/* Raise the standard NULL-argument error for argument argno. */
static void
le_check_not_null(FunctionCallInfo fcinfo, int argno, const char *name)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be NULL", name)));
}

/* Validate a text identifier argument (lease key or owner id). */
static char *
le_check_identifier(FunctionCallInfo fcinfo, int argno, const char *name, int maxlen)
{
	char	   *value;
	size_t		len;

	le_check_not_null(fcinfo, argno, name);
	value = text_to_cstring(PG_GETARG_TEXT_PP(argno));
	len = strlen(value);
	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be empty", name)));
	if (len > (size_t) maxlen)
		ereport(ERROR,
				(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
				 errmsg("%s is too long", name),
				 errdetail("The value is %zu bytes long; the limit is %d bytes.", len, maxlen)));
	return value;
}

/*
 * An input value as error messages quote it: whole when it has at most
 * LE_MAX_SHOWN_CHARS characters, else its first LE_MAX_SHOWN_CHARS
 * characters followed by "... (N bytes)", so that a message never repeats
 * megabytes of input.  The same rule as _le_show() in the install script.
 */
char *
le_check_show(const char *value)
{
	size_t		len = strlen(value);
	int			clip = pg_mbcharcliplen(value, (int) len, LE_MAX_SHOWN_CHARS);

	if ((size_t) clip >= len)
		return pstrdup(value);
	return psprintf("%.*s... (%zu bytes)", clip, value, len);
}

/* Validate the lease key argument. */
char *
le_check_key(FunctionCallInfo fcinfo, int argno)
{
	return le_check_identifier(fcinfo, argno, "lease_key", LE_MAX_KEY_LEN);
}

/* Validate the owner id argument. */
char *
le_check_owner(FunctionCallInfo fcinfo, int argno)
{
	return le_check_identifier(fcinfo, argno, "owner_id", LE_MAX_OWNER_LEN);
}

/* Validate a fencing token argument: tokens are positive. */
int64
le_check_token(FunctionCallInfo fcinfo, int argno)
{
	int64		token;

	le_check_not_null(fcinfo, argno, "fencing_token");
	token = PG_GETARG_INT64(argno);
	if (token <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("fencing_token must be positive, got " INT64_FORMAT, token),
				 errhint("Use the token returned by le_acquire().")));
	return token;
}

/*
 * Validate a ttl argument and return it in microseconds of elapsed time
 * (a day counts as 24 hours, a month as 30 days).
 */
int64
le_check_ttl(FunctionCallInfo fcinfo, int argno)
{
	Interval   *ttl;
	int64		usecs;
	int64		days;
	int64		part;
	int64		max_usecs = (int64) le_max_ttl_s * USECS_PER_SEC;

	le_check_not_null(fcinfo, argno, "ttl");
	ttl = PG_GETARG_INTERVAL_P(argno);
	if (!le_interval_is_finite(ttl))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ttl must be finite")));

	/*
	 * On overflow the sign comes from the operands, never from the wrapped
	 * product (which can have either sign).
	 */
	days = (int64) ttl->month * DAYS_PER_MONTH + ttl->day;
	if (pg_mul_s64_overflow(days, USECS_PER_DAY, &part))
		usecs = (days > 0) ? PG_INT64_MAX : PG_INT64_MIN;
	else if (pg_add_s64_overflow(part, ttl->time, &usecs))
		usecs = (ttl->time > 0) ? PG_INT64_MAX : PG_INT64_MIN;

	if (usecs <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ttl must be positive"),
				 errhint("A lease lasts for ttl after each acquire or renew; use e.g. '15 seconds'.")));
	if (usecs > max_usecs)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ttl exceeds leader_election.max_ttl"),
				 errdetail("The limit is %d seconds.", le_max_ttl_s),
				 errhint("Use a shorter ttl and renew more often, or have a superuser raise leader_election.max_ttl.")));
	return usecs;
}

/*
 * Validate le_acquire's wait argument and return it in microseconds: NULL
 * or zero is no wait; negative or infinite waits are refused.
 */
int64
le_check_wait(FunctionCallInfo fcinfo, int argno)
{
	Interval   *wait;
	int64		days;
	int64		part;
	int64		usecs;

	if (PG_ARGISNULL(argno))
		return 0;
	wait = PG_GETARG_INTERVAL_P(argno);
	if (!le_interval_is_finite(wait))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("wait must be finite"),
				 errhint("statement_timeout and a cancel end a wait too; use e.g. '30 seconds'.")));
	days = (int64) wait->month * DAYS_PER_MONTH + wait->day;
	if (pg_mul_s64_overflow(days, USECS_PER_DAY, &part))
		usecs = (days > 0) ? PG_INT64_MAX : PG_INT64_MIN;
	else if (pg_add_s64_overflow(part, wait->time, &usecs))
		usecs = (wait->time > 0) ? PG_INT64_MAX : PG_INT64_MIN;
	if (usecs < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("wait must not be negative"),
				 errhint("Pass NULL or zero for a single try.")));
	if (usecs > LE_MAX_WAIT_US)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("wait exceeds one day"),
				 errhint("Call le_acquire again when the wait ends.")));
	return usecs;
}

/*
 * Validate a metadata argument (jsonb): NULL is none; its text form is at
 * most LE_MAX_METADATA_LEN bytes, so that notifications carrying it stay
 * below the NOTIFY payload limit, and nests at most LE_MAX_METADATA_DEPTH
 * levels (what the client parses).  Returns it detoasted, or NULL.
 */
struct varlena *
le_check_metadata(FunctionCallInfo fcinfo, int argno)
{
	Jsonb	   *jb;
	char	   *text;
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	int			depth = 0;

	if (PG_ARGISNULL(argno))
		return NULL;
	jb = PG_GETARG_JSONB_P(argno);
	text = JsonbToCString(NULL, &jb->root, VARSIZE(jb));
	if (strlen(text) > LE_MAX_METADATA_LEN)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("metadata is too long"),
				 errdetail("Its text form has %zu bytes; the limit is %d.", strlen(text), LE_MAX_METADATA_LEN),
				 errhint("Publish an address or a small document; keep bulk data elsewhere.")));
	pfree(text);
	it = JsonbIteratorInit(&jb->root);
	while ((tok = JsonbIteratorNext(&it, &v, false)) != WJB_DONE)
	{
		if (tok == WJB_BEGIN_ARRAY || tok == WJB_BEGIN_OBJECT)
			depth++;
		else if (tok == WJB_END_ARRAY || tok == WJB_END_OBJECT)
			depth--;
		if (depth > LE_MAX_METADATA_DEPTH)
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("metadata is nested too deeply"),
					 errdetail("Arrays and objects nest at most %d levels deep in it.", LE_MAX_METADATA_DEPTH),
					 errhint("Clients parse notifications carrying it to that depth only.")));
	}
	return (struct varlena *) jb;
}

/* Refuse any lease change on a hot standby, with a message that says why. */
void
le_check_writable(const char *action)
{
	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("cannot %s a lease while the server is in recovery", action),
				 errdetail("Leases change only on the primary server; this one is a standby."),
				 errhint("Connect to the primary. Reading le_leases works here but may lag behind it.")));
}

/*
 * Refuse a partition group's name unless it has 1 to LE_MAX_GROUP_NAME_LEN
 * letters, digits, '_', '.' or '-' (so that it cannot end a key's group
 * part early, nor name another group's keys); for a name that is not an
 * SQL argument (a fence trigger's).
 */
void
le_check_group_name_value(const char *value)
{
	size_t		len = strlen(value);
	size_t		i;

	for (i = 0; i < len; i++)
	{
		char		c = value[i];

		if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
			  c == '_' || c == '.' || c == '-'))
			break;
	}
	if (len == 0 || len > LE_MAX_GROUP_NAME_LEN || i < len)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid group name \"%s\"", le_check_show(value)),
				 errdetail("A group name has 1 to %d characters, each a letter, digit, '_', '.' or '-'.",
						   LE_MAX_GROUP_NAME_LEN)));
}

/* Validate a partition group's name argument (le_check_group_name_value). */
char *
le_check_group_name(FunctionCallInfo fcinfo, int argno)
{
	char	   *value;

	le_check_not_null(fcinfo, argno, "group_name");
	value = text_to_cstring(PG_GETARG_TEXT_PP(argno));
	le_check_group_name_value(value);
	return value;
}

/* Validate a member id of a partition group (the holder of its leases). */
char *
le_check_member(FunctionCallInfo fcinfo, int argno)
{
	return le_check_identifier(fcinfo, argno, "member_id", LE_MAX_MEMBER_LEN);
}
