-- G5: A fenced table with plain inheritance children (not partitions): row
-- triggers of the parent do not fire for child rows reached through it, so
-- le_protect attaches the fence to every child too; le_unprotect removes it.
CREATE EXTENSION leader_election;
SELECT acquired, fencing_token FROM le_acquire('inh', 'a', '10 minutes');
CREATE TABLE inh_parent (id int PRIMARY KEY, note text, fencing_token bigint NOT NULL);
CREATE TABLE inh_child () INHERITS (inh_parent);
CREATE TABLE inh_grandchild () INHERITS (inh_child);
INSERT INTO inh_child VALUES (1, 'child', 1);
INSERT INTO inh_grandchild VALUES (2, 'grandchild', 1);
SELECT le_protect('inh_parent', 'inh');
SELECT tgrelid::regclass, tgname FROM pg_trigger WHERE tgname LIKE 'le_fence%' ORDER BY 1, 2;
-- A stale token through the parent: rejected for child and grandchild rows.
\set VERBOSITY terse
UPDATE inh_parent SET note = 'stale', fencing_token = 99 WHERE id = 1;
UPDATE inh_parent SET note = 'stale', fencing_token = 99 WHERE id = 2;
SET leader_election.fencing_token = '99';
DELETE FROM inh_parent WHERE id = 1;
TRUNCATE inh_parent;
RESET leader_election.fencing_token;
INSERT INTO inh_child VALUES (3, 'stale', 99);
-- The current token passes (the row keeps its token: declared for the
-- transaction).
BEGIN;
SET LOCAL leader_election.fencing_token = 1;
UPDATE inh_parent SET note = 'current', fencing_token = 1 WHERE id = 2;
COMMIT;
\set VERBOSITY default
SELECT tableoid::regclass, id, note FROM inh_parent ORDER BY id;
-- le_unprotect removes the fence from every table it was attached to.
SELECT le_unprotect('inh_parent');
SELECT count(*) AS fence_triggers_left FROM pg_trigger WHERE tgname LIKE 'le_fence%';
DROP TABLE inh_parent CASCADE;
DROP EXTENSION leader_election;
