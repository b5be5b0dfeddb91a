// Package natsstore is a durable [store.Store] on NATS JetStream, for a
// society whose state must outlive its process or live where several
// processes reach it.
//
// Open one with [New], hand it to the society, and [Store.Close] it when
// the society is done. The package's tests, and the host's, can run the
// server inside the test process with package natstest.
//
// # Layout
//
// A society's records are the keys of one key-value bucket (Options.Bucket,
// "agentsociety" by default), each id encoded as one key token
// (unpadded base64url; "=" for the empty id):
//
//	r.<id>            a role         {"id","name","rolePrompt","interfaceSpec","createdBy","createdAt","first"}
//	a.<id>            an agent       {"id","roleId","parentAgentId","taskId","taskBrief","status","createdAt","spawnKey","first"}
//	c.<owner>.<id>    a contact      {"owner","id","role","interfaceSpec","source","introducedBy","note","addedAt","first"}
//	q.<id>            a request      {"id","from","to","taskId","status","createdAt","deadline","first"}
//	m.<id>            a pending message {"id","seq","from","to","taskId","type","payload","sentAt"}
//	e.<id>            ends of handled messages, with Options.Fence {"ends":[{"key","rev"}]}
//	s.<scope>.<key>   a state entry  {"scope","key","value","writer","updatedAt"}
//	h.<agent>         a history's head {"agentId","summary","dropped","lo","hi"}
//	hm.<agent>.<n>    message n of a history, the society's JSON as given
//	x.<id>            an artifact's metadata, naming its object
//	rm.<id>.<n>       part n of the journal of a removal beyond one batch {"records":[{"key","rev"}],"histories":[{"agentId","lo","hi"}]}
//	fence             the claim of the store that writes (Options.Fence)
//	sync              a mark Load writes on a bucket of several replicas, to read up to it
//
// the artifacts' contents are objects in the object store
// Bucket+"_artifacts", and the society's events ([store.EventLog]) are
// in the stream Bucket+"_events", one message per append (or a few, past
// 256 KB) holding its events as a JSON array, with the Seqs of the first
// and last in its headers Agentsociety-First-Event and
// Agentsociety-Last-Event (and, with Options.Fence, the writer's claim in
// Agentsociety-Claim; a claim's own message there holds no events, its
// last Seq one below its first). Nested documents are embedded as JSON; times
// are RFC 3339 with nanoseconds. "first" is the revision at which a
// record was created, present once it has been replaced, so that Load lists records
// in the order they were first applied. A history holds messages lo to
// hi-1; indices only grow, and a history started anew (its agent has no
// head) starts at the highest revision the store knows, past every index
// a history of the agent had before. Records removed
// ([store.Change].Remove) are deleted: their keys, with, for an agent,
// the keys of its registry and its history; a record written again after
// is a new one, without "first". A journal names records removed that
// the bucket still holds: Load lists none whose revision is the one
// named.
//
// # Guarantees
//
// Apply writes a change as one JetStream atomic batch on the bucket's stream
// (the server must be 2.12 or later; New enables atomic batches on the
// stream), so the server stores all of it or none. Each record's write expects
// the key's revision as the store last saw it, so two stores on one bucket
// never interleave halves of their changes: the loser reads the keys again and
// retries, and a message pending through one is refused by the other with
// [store.ErrExists]. A change needing more writes than Options.MaxBatch (at
// most the server's max_batch_size, 1000 by default), or with a record larger
// than one message of the server's takes (its max_payload, 1 MB by default,
// less 1 KB for headers), is refused whole, except a change that only finishes
// messages, which is written one message at a time (see [store.Store]) or,
// with Options.Fence, as one record of ends (see below), and one with a
// removal that is over the limit, which is written through a journal: a first
// batch holds the change's writes of values and the journal, naming each
// record the change deletes (those removed, and any other, such as the state
// entries of the agents removed) with the revision removed, after which Load
// no longer lists them; the batches that follow delete them, each deletion
// expecting that revision, and then the journal. A store that stopped in
// between leaves the journal, which the next Load finishes. A removal's
// deletions expect their keys' revisions as any write does, and it costs what
// it removes: an agent's registry is found in the store's index of the
// registries, not by reading the bucket (so, of two stores on one bucket, one
// removes an agent's registry as it knows it: an entry the other added since
// it last read the bucket stays, and so does, for a removal through a journal,
// a record the other wrote since). Applies made at once go out together, each
// its own write with its own answer, and without waiting for the answers to
// those sent before them: a change waits for about one round trip, however
// many are in flight. A history append costs the messages it adds and the
// messages it drops, never the history's length, and a removal what it
// removes. Deleted keys leave markers that expire after Options.MarkerTTL,
// when the store's index of the keys forgets them too: neither grows with the
// keys ever deleted.
//
// With Options.Fence, a change that only finishes messages writes one key
// e.<id> naming each message's pending key and the revision it ends, and
// Load lists no message at a revision an end names. Once enough messages
// have ended, the store purges from the bucket's stream the pending keys
// below a revision (a message still pending below it is written again
// first, to a later revision) and the ends that name only keys purged
// before: the bucket holds about the messages pending, not every message
// ever handled. A store of an earlier version takes an e.<id> key for a
// corrupt record.
//
// Durability is the server's: what its stream's storage and replicas keep,
// this store keeps. On a bucket of several replicas, New turns off direct
// gets on the bucket's stream and the object store's (any replica answers
// one, including one that has not yet applied the last writes), so that
// every read of a key or an artifact is its stream leader's and sees what
// the store wrote. Load reads the bucket while holding off this store's
// Applies; writes by other stores meanwhile may show in part. An Apply
// whose change was sent waits for its answer up to Options.Timeout,
// whatever its context (see store.Store). One whose commit goes
// unanswered (the server did not answer in time, the connection dropped)
// may or may not have taken effect, whole, and so may the unanswered
// changes sent with it; the store then reads the bucket again before its
// next change.
//
// The store is not [store.Volatile]: every message a society accepts and
// finishes is recorded. docs/distributed.md in the repository describes
// how a society spread over several processes will build on it.
package natsstore
