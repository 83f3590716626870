# leader_election: PGXS build.
#
#   make                 build the extension and the client (src/client)
#   make install         install both (root, or a writable PostgreSQL tree)
#   make installcheck    regression, isolation and TAP tests, each against a
#                        throwaway server of its own (run as a non-root user)
#   test/run.sh          the whole suite from scratch; see CONTRIBUTING.md

EXTENSION    = leader_election
MODULE_big   = leader_election
# Every .c file in src/ belongs to the extension; the client lives in src/client.
OBJS         = $(patsubst %.c,%.o,$(sort $(wildcard src/*.c)))
PGFILEDESC   = "leader_election - fenced leases inside PostgreSQL"

# The base install script (1.0, released: its pieces never change) is
# generated from src/sql/NN_*.sql; each later version's upgrade script from
# src/sql/VERSION/NN_*.sql.  CREATE EXTENSION runs 1.0 and then the chain.
BASE_VERSION = 1.0
SQL_PARTS    = $(sort $(wildcard src/sql/*.sql))
UPGRADE_1.1  = $(sort $(wildcard src/sql/1.1/*.sql))
DATA_built   = $(EXTENSION)--$(BASE_VERSION).sql \
               $(if $(UPGRADE_1.1),$(EXTENSION)--1.0--1.1.sql)

# Tests are picked up by file name: sql/NAME.sql, test/specs/NAME.spec, test/t/*.pl.
REGRESS      = $(patsubst sql/%.sql,%,$(sort $(wildcard sql/*.sql)))
REGRESS_OPTS = --temp-instance=tmp_check --temp-config=test/regress.conf --load-extension=plpgsql
ISOLATION    = $(patsubst test/specs/%.spec,%,$(sort $(wildcard test/specs/*.spec)))
ISOLATION_OPTS = --inputdir=test --outputdir=test/results --temp-instance=tmp_check_iso --temp-config=test/regress.conf
TAP_TESTS    = 1
PROVE_TESTS  = $(sort $(wildcard test/t/*.pl))

PG_CONFIG   ?= pg_config
# -Wextra as CI demands; PostgreSQL's own headers trip -Wunused-parameter (PG_FUNCTION_ARGS, inline helpers)
PG_CFLAGS   += -Wall -Wextra -Werror -Wno-unused-parameter

PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

$(EXTENSION)--$(BASE_VERSION).sql: $(SQL_PARTS)
	cat $^ > $@
$(EXTENSION)--1.0--1.1.sql: $(UPGRADE_1.1)
	cat $^ > $@

$(OBJS): src/leader_election.h src/compat.h

# The libpq client library and pg_leader CLI (src/client/Makefile): built by
# "make", installed by "make install" into pg_config's bindir, libdir and
# includedir.  It is not part of OBJS (src/*.c does not recurse).
.PHONY: client install-client clean-client demo
# PGXS assigns CFLAGS and CPPFLAGS; when they also come from the environment
# (dpkg-buildpackage, a user's export), make would hand PGXS's server flags to
# the client's make, which has flags of its own.
unexport CFLAGS CPPFLAGS
all: client
client:
	$(MAKE) -C src/client PG_CONFIG='$(PG_CONFIG)'
install: install-client
install-client: client
	$(MAKE) -C src/client PG_CONFIG='$(PG_CONFIG)' install
clean: clean-client
clean-client:
	$(MAKE) -C src/client PG_CONFIG='$(PG_CONFIG)' clean

# The demo: three pg_leader candidates, SIGSTOP/SIGKILL of leaders, the fence
# rejecting a stale write (installs, builds and cleans up; see doc/client.md).
demo:
	PG_CONFIG='$(PG_CONFIG)' demo/run.sh

# The three kinds of tests one at a time (PGXS's installcheck runs them all
# and stops at the first failing kind).
.PHONY: installcheck-regress installcheck-isolation installcheck-tap
installcheck-regress: all
	$(pg_regress_installcheck) $(REGRESS_OPTS) $(REGRESS)
installcheck-isolation: all
	$(pg_isolation_regress_installcheck) $(ISOLATION_OPTS) $(ISOLATION)
installcheck-tap: all
	$(prove_installcheck)

EXTRA_CLEAN = test/results tmp_check_iso
