/*
 * late_writer: stands for any other extension whose XACT_EVENT_PRE_COMMIT
 * callback runs SQL (an outbox or audit flusher).  Loaded before
 * leader_election registers its callbacks, its callback runs after the
 * fence's commit-time check (PostgreSQL calls them newest first).  At
 * PRE_COMMIT it runs the SQL in the setting late_writer.sql.
 */
#include "postgres.h"
#include "access/xact.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "utils/guc.h"
#include "utils/snapmgr.h"

PG_MODULE_MAGIC;

void		_PG_init(void);
static char *late_sql = NULL;

/* Run late_writer.sql at PRE_COMMIT. */
static void
late_writer_xact(XactEvent event, void *arg)
{
	if (event != XACT_EVENT_PRE_COMMIT || late_sql == NULL || late_sql[0] == '\0')
		return;
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	PushActiveSnapshot(GetTransactionSnapshot());
	SPI_execute(late_sql, false, 0);
	PopActiveSnapshot();
	SPI_finish();
}

/* Register the setting and the callback. */
void
_PG_init(void)
{
	DefineCustomStringVariable("late_writer.sql", "SQL run at PRE_COMMIT.", NULL,
							   &late_sql, "", PGC_USERSET, 0, NULL, NULL, NULL);
	RegisterXactCallback(late_writer_xact, NULL);
}
