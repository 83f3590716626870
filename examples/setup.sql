-- Setup of the examples (examples/node, examples/java), as the extension's
-- owner: a protected table and a role that campaigns and writes to it.
CREATE TABLE example_jobs (
    id bigserial PRIMARY KEY,
    fencing_token bigint NOT NULL,
    what text NOT NULL,
    written_at timestamptz NOT NULL DEFAULT now()
);
SELECT le_protect('example_jobs', 'example-key');
CREATE ROLE example_app LOGIN;
SELECT le_grant('example_app', 'campaign');
GRANT INSERT ON example_jobs TO example_app;
GRANT USAGE ON SEQUENCE example_jobs_id_seq TO example_app;
