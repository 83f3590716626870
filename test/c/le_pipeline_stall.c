/*
 * le_pipeline_stall.c: a libpq client that stalls in the middle of a
 * pipeline, compiled by test/t/018_stalled_holder.pl.
 *
 *   le_pipeline_stall DSN QUERY SECONDS
 *		sends QUERY in pipeline mode followed by a flush request but no Sync,
 *		so that its implicit transaction stays open; prints "ready V" (V: the
 *		first column of the first row, or the error); sleeps SECONDS; then
 *		sends the Sync and prints "synced" if the server answered it, or
 *		"ended: MESSAGE" if the connection was gone.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <libpq-fe.h>

int
main(int argc, char **argv)
{
	PGconn	   *conn;
	PGresult   *res;

	if (argc != 4)
	{
		fprintf(stderr, "usage: %s DSN QUERY SECONDS\n", argv[0]);
		return 2;
	}
	conn = PQconnectdb(argv[1]);
	if (PQstatus(conn) != CONNECTION_OK)
	{
		fprintf(stderr, "%s", PQerrorMessage(conn));
		return 1;
	}
	if (!PQenterPipelineMode(conn) ||
		!PQsendQueryParams(conn, argv[2], 0, NULL, NULL, NULL, NULL, 0) ||
		!PQsendFlushRequest(conn) || PQflush(conn) != 0)
	{
		fprintf(stderr, "%s", PQerrorMessage(conn));
		return 1;
	}
	while ((res = PQgetResult(conn)) != NULL)
	{
		if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) > 0)
			printf("ready %s\n", PQgetvalue(res, 0, 0));
		else
			printf("ready error %s", PQresultErrorMessage(res));
		PQclear(res);
	}
	fflush(stdout);

	sleep((unsigned int) atoi(argv[3]));

	if (!PQpipelineSync(conn) || PQflush(conn) != 0)
	{
		printf("ended: %s", PQerrorMessage(conn));
		return 0;
	}
	for (;;)
	{
		res = PQgetResult(conn);
		if (res == NULL)
		{
			if (PQstatus(conn) != CONNECTION_OK)
				break;
			continue;
		}
		if (PQresultStatus(res) == PGRES_PIPELINE_SYNC)
		{
			printf("synced\n");
			PQclear(res);
			PQfinish(conn);
			return 0;
		}
		if (PQresultStatus(res) == PGRES_FATAL_ERROR && PQstatus(conn) != CONNECTION_OK)
		{
			PQclear(res);
			break;
		}
		PQclear(res);
	}
	printf("ended: %s", PQerrorMessage(conn));
	PQfinish(conn);
	return 0;
}
