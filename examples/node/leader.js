// Acquire a leader_election lease, write through its fence, release it,
// and show that a write with the token of an ended period is refused with
// SQLSTATE LE001.  node-postgres ("pg" from npm), no other library.
//
//   node leader.js DSN [KEY] [TABLE]
//
// TABLE (default example_jobs) must be protected by KEY (default
// example-key): see README.md.  Prints one line per step; exits 0 when
// every step did what it should.
'use strict';
const { Client } = require('pg');

const [dsn, key = 'example-key', table = 'example_jobs'] = process.argv.slice(2);
if (!dsn) {
  console.error('usage: node leader.js DSN [KEY] [TABLE]');
  process.exit(64);
}

// le_acquire: the row tells whether we got the lease and its fencing token.
async function acquire(db, owner, ttl) {
  const { rows } = await db.query(
    'SELECT acquired, fencing_token, holder FROM le_acquire($1, $2, $3::interval)', [key, owner, ttl]);
  if (!rows[0].acquired) throw new Error(`lease ${key} is held by ${rows[0].holder}`);
  return rows[0].fencing_token; // a bigint, as a string
}

// A fenced write: the token goes into the transaction, the fence trigger
// compares it with the lease's.  LE001 means our period is over: stop
// working as leader, never retry with the same token.
async function fencedInsert(db, token, what) {
  await db.query('BEGIN');
  try {
    await db.query("SELECT set_config('leader_election.fencing_token', $1, true)", [token]);
    await db.query(`INSERT INTO ${table} (fencing_token, what) VALUES ($1, $2)`, [token, what]);
    await db.query('COMMIT');
    return true;
  } catch (err) {
    await db.query('ROLLBACK');
    if (err.code === 'LE001') return false;
    throw err;
  }
}

async function main() {
  const db = new Client({ connectionString: dsn });
  await db.connect();
  const me = `node-${process.pid}`;
  const token = await acquire(db, me, '15 seconds');
  console.log(`acquired token=${token}`);
  if (!(await fencedInsert(db, token, 'work of the leader'))) throw new Error('own write refused');
  console.log(`write ok token=${token}`);
  const { rows } = await db.query('SELECT le_release($1, $2, $3) AS released', [key, me, token]);
  console.log(`released=${rows[0].released}`);

  // Someone else leads now; our old token must not pass the fence.
  const next = await acquire(db, `${me}-next`, '15 seconds');
  console.log(`next owner acquired token=${next}`);
  const stale = await fencedInsert(db, token, 'late write of the old leader');
  console.log(stale ? 'stale write COMMITTED (fence broken)' : `stale write refused: LE001 (token ${token} < ${next})`);
  await db.query('SELECT le_release($1, $2, $3)', [key, `${me}-next`, next]);
  await db.end();
  process.exit(stale ? 1 : 0);
}

main().catch((err) => {
  console.error(`error: ${err.message}${err.code ? ` (SQLSTATE ${err.code})` : ''}`);
  process.exit(1);
});
