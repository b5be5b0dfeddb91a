// Package filestore is a durable [store.Store] kept in a directory.
//
// Open a directory with [Open] and hand the [*Store] to a society; [Store.Close]
// it when the society is done. A directory is held by one Store at a time:
// a second Open of a directory that is open fails with an error wrapping
// [ErrLocked], in this process or another.
//
// # On-disk layout
//
//	dir/
//	  LOCK            empty; held with flock(LOCK_EX|LOCK_NB) while open
//	  org.json        snapshot of the organisation (seed 001 "Data Models")
//	  pending.json    snapshot of the messages accepted and not finished
//	  state.json      snapshot of the shared and private state (seed 004)
//	  histories.json  snapshot of the model-driven agents' histories
//	  journal.log     changes applied since the snapshots, append-only
//	  artifacts/
//	    <hex>         an artifact's content, exactly as put
//	    <hex>.json    its metadata (the sidecar); <hex> is the lower-case
//	                  hex SHA-256 of the artifact id
//
// Files whose names end in ".tmp" are writes in progress; Open removes them.
//
// org.json is an indented JSON object in the layout of seed 001, with three
// bookkeeping fields of the store's own:
//
//	{
//	  "crc32c": "89abcdef",
//	  "version": 2,
//	  "journalSeq": 1234,
//	  "roles": [{"id", "name", "rolePrompt", "interfaceSpec", "createdBy", "createdAt"}],
//	  "agents": [{"id", "roleId", "parentAgentId", "taskId", "taskBrief", "status", "createdAt", "spawnKey"}],
//	  "contactRegistries": {
//	    "<owner agent id>": [{"id", "role", "interfaceSpec", "source", "introducedBy", "note", "addedAt"}]
//	  },
//	  "requests": [{"id", "from", "to", "taskId", "status", "createdAt", "deadline"}]
//	}
//
// Lists keep the order records were first added; a contact registry keeps
// the order its contacts were added. A record added again after its
// removal is a new one, listed in its new place. interfaceSpec, taskBrief and payload are
// the JSON documents the society gave, embedded as JSON; times are RFC 3339
// with nanoseconds. Empty documents, empty optional strings and zero times
// are left out. The society never gives the store its built-in agents, root
// and user, so org.json never lists them; the store writes what it is given
// and does not check that itself.
//
// The other snapshots have the same three bookkeeping fields and one list:
//
//	pending.json    {"crc32c", "version", "journalSeq", "messages": [{"id", "seq", "from", "to", "taskId", "type", "payload", "sentAt"}]}
//	state.json      {"crc32c", "version", "journalSeq", "entries": [{"scope", "key", "value", "writer", "updatedAt"}]}
//	histories.json  {"crc32c", "version", "journalSeq", "histories": [{"agentId", "summary", "messages", "dropped"}]}
//
// in the order Load returns them: messages by seq, entries by scope and
// key, histories by agent id. A history's messages are a list of the
// society's JSON values, oldest first. histories.json, which can be large,
// is not indented.
//
// "crc32c" is the file's checksum, and comes first: the CRC-32C
// (Castagnoli) of every byte that follows the comma after it, to the end
// of the file, as eight lower-case hex digits. So the file stays JSON that
// people and tools read as before, and Open checks it before it reads the
// rest: a mismatch, one changed bit anywhere in the file, is an error
// wrapping [ErrCorrupt] that names the file. The artifacts' sidecars begin
// with one too, which GetArtifact checks. A file without a checksum is read
// only if it has no "version" either, as one written by hand (seed 001's
// example org.json) has not; files written by this package's version 1,
// before the checksum, are refused by their version. "version" is 2.
//
// "journalSeq" is the sequence number of the last journal record the
// snapshot includes. The snapshots are written one after the other, so
// after a crash between them they may differ; Open replays each journal
// record into the parts of the state whose snapshots do not yet include
// it.
//
// journal.log is a sequence of records, one per [Store.Apply], each framed
// as
//
//	length   uint32, little-endian: the number of bytes of the payload
//	checksum uint32, little-endian: CRC-32C (Castagnoli) of the payload
//	payload  a JSON object: {"lsn": N, "roles", "agents", "contacts",
//	         "requests", "accepted", "finished", "states", "histories",
//	         "historyAppends", "remove"}
//
// where lsn numbers the records 1, 2, 3, ... without gaps for the life of
// the directory, contacts are contact entries with an "owner" field,
// finished is a list of message ids, a state entry without a value deletes
// its key, a history replaces the agent's whole one, and the other fields
// are as in the snapshots; empty fields are left out. historyAppends are
// what turns added to histories, applied after "histories" in order, each
//
//	{"agentId", "drop", "summary", "messages"}
//
// removing the first "drop" messages of the agent's history, replacing its
// summary if "summary" is present (even empty), then appending "messages".
// So a turn costs the journal what the turn added; compaction folds the
// appends into histories.json.
//
// "remove" names what the society forgot ([store.Removal]), applied after
// the rest of the record:
//
//	{"agents": [id], "roles": [id], "requests": [id], "contacts": [{"owner", "id"}]}
//
// each list left out when empty. Removing an agent removes its record, the
// contact registry it owns (even if it has no record) and its history;
// "contacts" removes single entries of registries. So a removal costs the
// journal what it names, and the next compaction writes snapshots without
// what was removed: the directory does not grow with what the society has
// forgotten. A record that only removes is a change, not the marker below.
// Records written before removals existed have no "remove" and are read as
// before; a version of this package from before then ignores the field, so
// it must not open a directory that holds one.
//
// A journal that a compaction started begins with a marker: a record
// {"lsn": N} with no change, N the last record the snapshots include
// (which they hold, so replay skips it). So the journal says where it
// starts even when no record follows, and a directory whose snapshots are
// all gone is found missing records 1 to N, not taken for a new one.
// Journals written before the marker have none until their next
// compaction, which Close makes.
//
// # Guarantees
//
// Apply appends one record to the journal with one write, then applies the
// change to the state in memory, so a change is all in the journal or not
// at all. Under [SyncEveryRecord], the default, Apply returns only after the
// record is on stable storage (fdatasync); concurrent Applies share one sync
// (group commit). Under [SyncBatched], Apply returns after the write, which
// survives a crash of the process, and a background goroutine syncs at most
// Options.SyncInterval after it, so a crash of the machine loses at most that
// much. A process killed at any instant leaves a directory that Open
// recovers: Open loads the snapshots, replays the journal, and cuts off a
// torn tail at the last good record, logging the offset and the bytes
// dropped.
//
// A record Open cannot read (a short record, a bad checksum, a payload
// that is not a record) is a torn tail or damage, and this rule tells them
// apart: Open looks at every later byte offset of the file for an intact
// record, a whole frame whose checksum matches and whose payload is a
// record numbered above the last good one and above what every snapshot
// includes. If there is none, the bad record is the last write, cut short
// by a crash, and the journal is cut before it. If there is one, records
// were written after the bad one was whole, so it was damaged since (a
// disk's bit rot, a stray write): Open fails with an error wrapping
// [ErrCorrupt] that names the file and the offset of the damaged record,
// and leaves the file as it is, for it never drops acknowledged records to
// open. To open such a directory anyway, losing every record from that
// offset on, truncate the journal there. (A crash of the machine under
// SyncBatched, on a file system that writes a file's pages out of order,
// could in principle leave an unsynced record damaged before an intact
// one; Open cannot tell that from bit rot, and refuses too.)
//
// A snapshot whose checksum does not match, or that does not parse, and a
// journal whose records do not follow the snapshots (a gap in the record
// numbers, a snapshot deleted, or all of them), are errors wrapping
// ErrCorrupt that name the file: Open never silently starts empty or drops
// what it cannot read. A directory without snapshots opens empty only if
// its journal is empty too, or starts at record 1 and so holds every
// record.
//
// Compaction writes the state into fresh snapshots (a temporary file,
// fsync, rename, fsync of the directory) and then starts a new journal
// holding the marker and the records applied meanwhile. It runs in the background once
// the journal holds Options.CompactAfter records or Options.CompactAfterBytes
// bytes, and at least as many bytes as the last snapshots, so that its cost
// per Apply stays constant however large the organisation grows (again at
// once, if the records applied meanwhile are already that many); and once
// more on Close. Apply never rewrites org.json.
//
// An artifact is written to a temporary file, synced and renamed, then its
// sidecar the same way; the sidecar is the commit point. Artifacts are
// immutable: putting an id that exists fails with [store.ErrExists]. File
// names come from a hash of the id, never from the id itself, and ids are
// checked as well: an id that is empty, longer than 128 bytes, not UTF-8,
// absolute, or contains "/", "\", "..", NUL or another control character is
// refused by PutArtifact and not found by GetArtifact.
//
// A write or sync of the journal that fails leaves the store refusing
// Apply and Load with that error until it is reopened: after a failed fsync
// what is on disk is unknown, and the state in memory may hold a change the
// disk does not. (A write that fails and is undone, as when the disk is full,
// fails only its own Apply.)
//
// Strings in records must be valid UTF-8, as JSON requires, and nested
// documents valid JSON; Apply refuses a change that breaks either rule rather
// than store something other than what it was given. Nested documents are
// kept compacted: white space between JSON tokens is dropped. Times keep
// their instant to the nanosecond and their offset from UTC (in whole
// minutes; an offset with seconds is kept as UTC), not their location.
// Roles, agents, requests and contact entries must have ids (and entries
// owners), as [store.Memory], which holds the state, requires; Apply
// refuses a change with one that has none before it writes it.
//
// The directory lock is flock(2), which Linux, macOS, the BSDs and illumos
// have; on other systems Open fails rather than run unlocked.
package filestore
