-- ---------------------------------------------------------------------------
-- The end of the 1.0 to 1.1 update: drop the helpers that only this script
-- uses (05_copy_grants.sql), so that 1.1 has the same objects whether it
-- was created at once or updated from 1.0.
-- ---------------------------------------------------------------------------

DROP FUNCTION @extschema@._le_copy_execute_grants(name, integer, integer);
