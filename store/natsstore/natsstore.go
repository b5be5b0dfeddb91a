package natsstore

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"agentsociety/store"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrClosed is returned, wrapped, by the methods of a closed [Store].
var ErrClosed = errors.New("natsstore: store is closed")

// ErrConflict is returned, wrapped, by [Store.Apply] when another writer
// kept changing the keys of a change while Apply tried it again and again.
var ErrConflict = errors.New("natsstore: conflicting writes")

// ErrFenced is returned, wrapped with its cause, by the writes of a
// [Store] opened with Options.Fence once it is fenced: another store has
// claimed its bucket (nothing of the refused write was stored), or a
// write's outcome is unknown (no answer: the connection closed, or the
// server did not answer in time), so that this store can no longer tell
// its own writes from another's. Either way the store writes nothing more.
var ErrFenced = errors.New("natsstore: fenced: the store writes no more to its bucket")

// ErrCorrupt is returned, wrapped, by [Store.Load] when the bucket holds
// something this package did not write or cannot read: a value that does
// not parse, or a history whose head names messages that are missing.
var ErrCorrupt = errors.New("natsstore: corrupt bucket")

// Defaults for the zero fields of [Options].
const (
	DefaultBucket    = "agentsociety"
	DefaultMaxBatch  = 1000
	DefaultMarkerTTL = time.Hour
	DefaultTimeout   = 10 * time.Second
)

// conflictRetries is how many times Apply refreshes the keys of a change
// that lost a compare-and-set to another writer and tries again.
const conflictRetries = 4

// Options configures a [Store]. The zero value connects to
// nats.DefaultURL and uses the bucket [DefaultBucket].
type Options struct {
	// URL is the NATS server or cluster to connect to, as nats.Connect
	// takes it; empty means nats.DefaultURL. Ignored when Conn is set.
	URL string

	// NATSOptions are passed to nats.Connect when the store makes its own
	// connection.
	NATSOptions []nats.Option

	// Conn is a connection the store uses instead of making one. The store
	// does not close it.
	Conn *nats.Conn

	// Bucket names the key-value bucket that holds the society; the
	// artifacts' contents go to the object store Bucket+"_artifacts".
	// Letters, digits, "-" and "_". Empty means DefaultBucket.
	Bucket string

	// Storage and Replicas configure the bucket and the object store when
	// New creates them: file storage and one replica by default.
	Storage  jetstream.StorageType
	Replicas int

	// MaxBatch is the most writes one Apply may make, which must not be
	// above the server's limit on the size of an atomic batch (its
	// jetstream max_batch_size, 1000 unless configured). Zero means
	// DefaultMaxBatch.
	MaxBatch int

	// MarkerTTL is how long the marker a deleted key leaves stays in the
	// bucket (a finished message, a deleted state key, a dropped history
	// message, a record removed), so that the bucket does not grow with
	// every message the society handles; the store's index of the bucket
	// forgets the key then too. (With Fence, the messages a change that
	// only finishes messages ends leave no marker: see the package
	// documentation.) Zero means DefaultMarkerTTL; at least a second.
	MarkerTTL time.Duration

	// Timeout bounds each call whose context has no deadline, so that a
	// server that does not answer is an error, not a hang; and it bounds
	// an Apply's writes once sent, whatever the caller's context: an
	// Apply that has sent its change waits for the server's answer (up to
	// Timeout) rather than give up with its outcome unknown. Zero means
	// DefaultTimeout.
	Timeout time.Duration

	// Fence makes the store its bucket's one writer. New claims the bucket
	// by writing its key "fence", and every later write of the store
	// expects the last sequence of the bucket's stream to be the one its
	// own last write left, which the server checks with the write
	// (Nats-Expected-Last-Sequence, on the first message of a batch); the
	// first message of each of the changes written together also expects
	// the fence key's revision to be the one the claim wrote. Once
	// another store has claimed the bucket, this one's next write is
	// refused by the server, nothing of it stored, and it and every later
	// write fail with [ErrFenced]; [Store.Fenced] is closed. A write whose
	// outcome is unknown fences the store too: it cannot tell its own
	// write from another's. Artifacts are then written through the same
	// path. The event log, a stream of its own, is claimed too: the claim
	// appends a message there that holds no events, so that a deposed
	// store's next append is refused, and one that learns the log again
	// finds another's claim on it and fails with [ErrFenced].
	Fence bool

	// Logger receives what the store cannot return: the removal of
	// messages a history dropped, when it fails after the change that
	// dropped them was recorded. Nil means slog.Default().
	Logger *slog.Logger
}

// Store is a durable [store.Store] on NATS JetStream; see the package
// documentation for its layout and guarantees. It is safe for concurrent
// use. Make one with [New] and release it with [Store.Close].
type Store struct {
	opts    Options
	log     *slog.Logger
	nc      *nats.Conn
	ownConn bool
	kv      jetstream.KeyValue
	stream  jetstream.Stream // the bucket's
	// replicated: the bucket's stream has several replicas, on which a
	// round of group commit goes as one atomic batch (see commitBatch).
	replicated bool
	js         jetstream.JetStream
	// events is the event log's stream, eventSubj its subject.
	events    jetstream.Stream
	eventSubj string
	obs       jetstream.ObjectStore
	prefix    string // the subject of every key starts with it: "$KV.<bucket>."
	// Header values: the Nats-TTL of deletion markers, the fence key's
	// subject, and (with Options.Fence) the revision of its claim.
	ttlHeader, fenceSubject, claimedHeader []string

	// closeMu is held for reading by every call in progress and for writing
	// by Close, so that Close waits for them.
	closeMu sync.RWMutex
	closed  bool

	// mu orders Apply and Load: a Load sees every change this Store
	// applied before it, and none half. It also guards the index, the
	// requests' results and replies. Lock order: mu, then qmu.
	mu sync.Mutex
	// qmu guards queue, the Applies waiting to be written.
	qmu   sync.Mutex
	queue []*applyReq
	// replies receives the answers to the writes of flights (see
	// launch), on subjects under inbox; made on first use. round counts
	// the flights and rounds of two changes or more.
	replies *nats.Subscription
	inbox   string
	round   uint64
	// The flights in the air, oldest first, and by the keys they write;
	// flightNo numbers them. sent is, with Options.Fence, the stream's
	// last sequence once every flight is written. settling: a goroutine
	// holds the settler's role. draining: no flight may be sent until
	// every one in the air has settled. garbage: dropped history
	// messages to delete once no flight is in the air (see collect).
	flights []*flight
	flying  map[string]*flight
	// roundKeys are the keys of the round gather makes; kept for the next.
	roundKeys map[string]bool
	flightNo  uint64
	sent      uint64
	settling  bool
	draining  bool
	garbage   []write
	// scratch is the message launch fills for each write it publishes.
	scratch nats.Msg
	// early holds answers to flights that came while an earlier one was
	// being settled; the settler's, not guarded by mu.
	early map[answerKey][]byte
	// indexed says whether revs and heads mirror the bucket, as far as
	// this Store knows: they are rebuilt by a scan after an Apply whose
	// outcome is unknown.
	indexed bool
	revs    map[string]rev     // by key, for every key written with compare-and-set
	heads   map[string]headRec // the histories' heads, by agent id
	// registries lists the contact keys by the token of their owner (see
	// setRev), so that removing an agent finds its registry at the cost
	// of the registry, not of the bucket.
	registries map[string]*registry
	// expiring lists the keys the index knows deleted, from expiring[exp],
	// in the order their markers expire: the index forgets each then (see
	// forgetExpired), so that it does not grow with every key deleted.
	expiring []expiry
	exp      int
	// journals are the removals recorded whose records the bucket still
	// holds, and hidden those records, by key: the revision removed (see
	// journal.go).
	journals []*journal
	hidden   map[string]uint64
	// With Options.Fence (see ends.go): ends holds the pending keys that
	// a record of ends names, by key: the revision ended; present lists
	// the pending keys the bucket holds, ended or not, each at the
	// revision written, oldest first (some written again since, or
	// forgotten); sinceSweep counts the messages ended since the last
	// sweep, and swept is the revision that sweep purged below; sweeps
	// counts them.
	ends       map[string]uint64
	present    []keyRev
	sinceSweep int
	sweepAfter int
	swept      uint64
	sweeps     int
	// compactAt is the length of present past which it is compacted
	// (see notePresent).
	compactAt int
	// sweeping: a sweep is under way; scans counts the reads of the
	// bucket, which rebuild the index. sweepWanted is set, without s.mu,
	// once a sweep is due.
	sweeping    bool
	scans       uint64
	sweepWanted atomic.Bool
	// top is the highest revision the index knows of: a history started
	// anew starts at it, past every index the agent's history had before
	// (a message is written at a revision above its index).
	top uint64

	// emu orders AppendEvents and guards what it knows of the event log,
	// if evKnown: evNext is the Seq the log expects next (zero when it is
	// empty: any), and evStream the sequence of its stream's last message.
	// Learnt again after a failed append.
	emu      sync.Mutex
	evKnown  bool
	evNext   uint64
	evStream uint64
	evClaim  string // the claim the stream's last message names ("" for none)
	// evIndex is, if evKnown, the messages of the stream from the first
	// this store appended since it learnt the log to its last, evStream:
	// their sequences and the Seqs of their events, so that a trim finds
	// where to cut without reading them back (see trimPoint).
	evIndex []evSpan
	// evBuf is the body of the last append, kept for the next: the
	// client copies a message out as it publishes it.
	evBuf []byte

	// last is, with Options.Fence, the sequence of the stream's last
	// message as this store's last write left it. Guarded by mu.
	last uint64
	// claimed is, with Options.Fence, the revision of the fence key that
	// this store's claim wrote, and claimID what it wrote there; set once,
	// before New returns.
	claimed    uint64
	claimID    string
	fenced     chan struct{} // closed once the store is fenced
	fencedOnce sync.Once

	// testSettleAfter, set by a test, makes ApplyFlights wait before it
	// settles the flights it sent; testStopAfterJournal makes a removal
	// beyond one batch stop after its first, as if the process died;
	// testBetweenBatches is called by cleanupLater between its batches.
	testSettleAfter      time.Duration
	testStopAfterJournal bool
	testBetweenBatches   func()
}

// rev is what the store knows of a key: the revision (the stream sequence)
// of its last write, whether that write holds a value or marks the key
// deleted, and, for roles, agents, contacts and requests, the revision at
// which the record was created, which orders it.
type rev struct {
	seq   uint64
	first uint64
	live  bool
}

// A registry is the contact keys of one owner as the index knows them:
// each live one once, and some no longer live, which are dropped once they
// are half of the list (see setRev).
type registry struct {
	keys []string
	dead int // how many of keys are not live
}

// setRev records r as what the store knows of key, keeping the registries
// and top. Called with s.mu held.
func (s *Store) setRev(key string, r rev) {
	s.top = max(s.top, r.seq)
	if !strings.HasPrefix(key, prefixContact) {
		s.revs[key] = r
		return
	}
	was := s.revs[key].live
	s.revs[key] = r
	switch {
	case r.live && !was:
		owner := ownerTok(key)
		reg := s.registries[owner]
		if reg == nil {
			reg = &registry{}
			s.registries[owner] = reg
		}
		reg.keys = append(reg.keys, key)
	case was && !r.live:
		s.unregister(key)
	}
}

// An expiry is a key deleted at revision seq, whose marker expires at at.
type expiry struct {
	key string
	seq uint64
	at  time.Time
}

// deleted records in the index that key was deleted at revision seq, its
// marker to expire at at. Called with s.mu held.
func (s *Store) deleted(key string, seq uint64, at time.Time) {
	s.setRev(key, rev{seq: seq})
	s.expiring = append(s.expiring, expiry{key, seq, at})
}

// forgetExpired drops from the index the keys deleted whose markers have
// expired by now: the bucket no longer holds anything of them, and a
// write expecting the marker's revision would be refused. Called with
// s.mu held.
func (s *Store) forgetExpired(now time.Time) {
	for ; s.exp < len(s.expiring) && !s.expiring[s.exp].at.After(now); s.exp++ {
		e := s.expiring[s.exp]
		if r := s.revs[e.key]; r.seq == e.seq && !r.live {
			delete(s.revs, e.key)
		}
		s.expiring[s.exp] = expiry{}
	}
	if s.exp > 64 && 2*s.exp > len(s.expiring) {
		n := copy(s.expiring, s.expiring[s.exp:])
		clear(s.expiring[n:])
		s.expiring, s.exp = s.expiring[:n], 0
	}
}

// forget drops key from the index: the bucket does not hold it. Called
// with s.mu held.
func (s *Store) forget(key string) {
	was := s.revs[key].live
	delete(s.revs, key)
	if was && strings.HasPrefix(key, prefixContact) {
		s.unregister(key)
	}
}

// unregister counts a contact key of its owner's registry that is no
// longer live, and compacts the registry once half of it is such keys, so
// that its cost follows its live entries.
func (s *Store) unregister(key string) {
	owner := ownerTok(key)
	reg := s.registries[owner]
	if reg == nil {
		return
	}
	if reg.dead++; 2*reg.dead < len(reg.keys) {
		return
	}
	live := reg.keys[:0]
	for _, k := range reg.keys {
		if s.revs[k].live {
			live = append(live, k)
		}
	}
	// A key deleted and written again is listed twice, once as dead.
	slices.Sort(live)
	live = slices.Compact(live)
	clear(reg.keys[len(live):])
	reg.keys, reg.dead = live, 0
	if len(live) == 0 {
		delete(s.registries, owner)
	}
}

var _ store.Store = (*Store)(nil)

// New connects to NATS, or uses Options.Conn, and opens the store in
// Options.Bucket, creating the key-value bucket and the object store if they
// do not exist and enabling atomic batches on the bucket's stream. A server
// that cannot be reached, or that has no JetStream, is an error returned
// within ctx's deadline, or Options.Timeout if ctx has none.
func New(ctx context.Context, opts Options) (*Store, error) {
	if opts.URL == "" {
		opts.URL = nats.DefaultURL
	}
	if opts.Bucket == "" {
		opts.Bucket = DefaultBucket
	}
	if opts.Storage == 0 {
		opts.Storage = jetstream.FileStorage
	}
	if opts.Replicas == 0 {
		opts.Replicas = 1
	}
	if opts.MaxBatch == 0 {
		opts.MaxBatch = DefaultMaxBatch
	}
	if opts.MarkerTTL == 0 {
		opts.MarkerTTL = DefaultMarkerTTL
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	switch {
	case opts.MaxBatch < 1:
		return nil, fmt.Errorf("natsstore: MaxBatch %d is below 1", opts.MaxBatch)
	case opts.MarkerTTL < time.Second:
		return nil, fmt.Errorf("natsstore: MarkerTTL %v is below a second", opts.MarkerTTL)
	case opts.Timeout < 0:
		return nil, fmt.Errorf("natsstore: negative Timeout %v", opts.Timeout)
	}
	s := &Store{
		opts:         opts,
		log:          cmp.Or(opts.Logger, slog.Default()),
		prefix:       "$KV." + opts.Bucket + ".",
		ttlHeader:    []string{opts.MarkerTTL.String()},
		fenceSubject: []string{"$KV." + opts.Bucket + "." + keyFence},
		fenced:       make(chan struct{}),
		flying:       make(map[string]*flight),
		roundKeys:    make(map[string]bool),
		early:        make(map[answerKey][]byte),
		ends:         make(map[string]uint64),
		sweepAfter:   sweepAfter,
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()

	s.nc = opts.Conn
	if s.nc == nil {
		nc, err := nats.Connect(opts.URL, append([]nats.Option{nats.Timeout(opts.Timeout)}, opts.NATSOptions...)...)
		if err != nil {
			return nil, fmt.Errorf("natsstore: connecting to %s: %w", opts.URL, err)
		}
		s.nc, s.ownConn = nc, true
	}
	err := s.open(ctx)
	if err == nil && opts.Fence {
		err = s.claim(ctx)
	}
	if err != nil {
		if s.ownConn {
			s.nc.Close()
		}
		return nil, fmt.Errorf("natsstore: opening bucket %q: %w", opts.Bucket, err)
	}
	return s, nil
}

// open binds the bucket and the object store, creating them if need be.
func (s *Store) open(ctx context.Context) error {
	js, err := jetstream.New(s.nc)
	if err != nil {
		return err
	}
	s.js = js
	o := s.opts
	s.kv, err = js.KeyValue(ctx, o.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		s.kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: o.Bucket, History: 1, Storage: o.Storage, Replicas: o.Replicas,
			Description: "agentsociety: one society's organisation, messages, state and histories",
		})
		if errors.Is(err, jetstream.ErrBucketExists) { // made meanwhile by another store
			s.kv, err = js.KeyValue(ctx, o.Bucket)
		}
	}
	if err != nil {
		return err
	}
	// Apply writes each change as one atomic batch; deletion markers
	// expire by their Nats-TTL header.
	s.stream, err = js.Stream(ctx, "KV_"+o.Bucket)
	if err != nil {
		return err
	}
	s.replicated = s.stream.CachedInfo().Config.Replicas > 1
	if cfg := s.stream.CachedInfo().Config; !cfg.AllowAtomicPublish || !cfg.AllowMsgTTL {
		cfg.AllowAtomicPublish, cfg.AllowMsgTTL = true, true
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			return fmt.Errorf("enabling atomic batches: %w", err)
		}
	}
	objects := o.Bucket + "_artifacts"
	s.obs, err = js.ObjectStore(ctx, objects)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		s.obs, err = js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{
			Bucket: objects, Storage: o.Storage, Replicas: o.Replicas,
			Description: "agentsociety: the contents of the artifacts of bucket " + o.Bucket,
		})
		if errors.Is(err, jetstream.ErrBucketExists) {
			s.obs, err = js.ObjectStore(ctx, objects)
		}
	}
	if err != nil {
		return err
	}
	if s.replicated {
		if err := s.readFromLeaders(ctx, "KV_"+o.Bucket, "OBJ_"+objects); err != nil {
			return err
		}
	}
	return s.openEvents(ctx, js)
}

// readFromLeaders makes the streams of the bucket and of the object store,
// of several replicas, answer the reads of a message from their leaders,
// not with direct gets, which any replica answers, one that has not yet
// applied the last writes too: a store must read what it wrote (an
// artifact it has just put, the fence key it has just claimed, the keys it
// learns again after a refused write). It binds the bucket and the object
// store again, to read as their streams now say.
func (s *Store) readFromLeaders(ctx context.Context, streams ...string) error {
	for _, name := range streams {
		strm, err := s.js.Stream(ctx, name)
		if err != nil {
			return err
		}
		if cfg := strm.CachedInfo().Config; cfg.AllowDirect {
			cfg.AllowDirect = false
			if _, err := s.js.UpdateStream(ctx, cfg); err != nil {
				return fmt.Errorf("reading %s from its leader: %w", name, err)
			}
		}
	}
	var err error
	if s.kv, err = s.js.KeyValue(ctx, s.opts.Bucket); err != nil {
		return err
	}
	if s.stream, err = s.js.Stream(ctx, "KV_"+s.opts.Bucket); err != nil {
		return err
	}
	s.obs, err = s.js.ObjectStore(ctx, s.opts.Bucket+"_artifacts")
	return err
}

// bound returns ctx with the store's Timeout as its deadline if it has
// none.
func (s *Store) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.opts.Timeout)
}

// Close ends the store: it waits for the calls in progress and closes the
// connection if New made it. Later calls fail with [ErrClosed]. Close is
// idempotent.
func (s *Store) Close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.ownConn {
		s.nc.Close()
	} else if s.replies != nil {
		s.replies.Unsubscribe()
	}
	return nil
}

// begin starts a call: it fails if ctx has ended or the store is closed,
// and otherwise returns ctx bounded by Options.Timeout if it has no
// deadline, and the function that ends the call.
func (s *Store) begin(ctx context.Context) (context.Context, func(), error) {
	if err := s.enter(ctx); err != nil {
		return nil, nil, err
	}
	ctx, cancel := s.bound(ctx)
	return ctx, func() { cancel(); s.closeMu.RUnlock() }, nil
}

// enter starts a call as begin does, leaving ctx as it is: the call
// bounds its waits itself. Its end is s.closeMu.RUnlock.
func (s *Store) enter(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.closeMu.RLock()
	if s.closed {
		s.closeMu.RUnlock()
		return ErrClosed
	}
	return nil
}

// Load reads the whole bucket; see [store.Store]. It holds off this
// Store's Applies while it reads, so it sees each of them whole or not at
// all.
func (s *Store) Load(ctx context.Context) (store.State, error) {
	ctx, done, err := s.begin(ctx)
	if err != nil {
		return store.State{}, err
	}
	defer done()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.quiesce()
	st, err := s.scan(ctx)
	if err == nil {
		// Removals recorded that a store left before it deleted their
		// records: the state lists none of those.
		for _, j := range slices.Clone(s.journals) {
			s.cleanup(ctx, j)
		}
	}
	return st, err
}

// Apply records c as one atomic batch on the bucket's stream; see
// [store.Store] and the package documentation. A change that needs more
// writes than Options.MaxBatch is refused whole. Concurrent Applies are
// written together, each still atomic on its own (see await and
// commitQueue).
func (s *Store) Apply(ctx context.Context, c store.Change) error {
	// Unbounded: a flight bounds its wait by its own deadline, and what
	// else waits on the server bounds its ctx (prepare, applyOne,
	// commitQueue).
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.closeMu.RUnlock()
	if c.Empty() {
		return nil
	}
	enc, err := encode(&c) // before taking the lock, which holds up every Apply
	if err != nil {
		return err
	}
	r := &applyReq{ctx: ctx, c: &c, enc: enc}
	s.qmu.Lock()
	s.queue = append(s.queue, r)
	s.qmu.Unlock()
	s.mu.Lock()
	if s.pipelined() {
		s.await(r) // unlocks
	} else {
		if !r.done {
			s.commitQueue()
		}
		s.mu.Unlock()
	}
	if r.journal != nil {
		s.cleanupLater(ctx, r.journal)
	}
	if s.sweepWanted.Load() {
		s.sweep()
	}
	return r.err
}

// applyOne records c on its own, as one atomic batch, learning again the
// revisions of its keys and trying again when another writer changed
// them. p, if not nil, is c's plan, made against the index as it is. A
// change written through a journal returns it, for the caller to delete
// what it removed (cleanupLater). Called with s.mu held.
func (s *Store) applyOne(ctx context.Context, c *store.Change, p *plan) (*journal, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// Once begun, the change is written under the store's own bound, not
	// the caller's context: one that ended mid-write would leave its
	// outcome unknown (and, with Fence, fence the store).
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.Timeout)
	defer cancel()
	for try := 0; ; try++ {
		if p == nil {
			var err error
			if p, err = s.prepare(ctx, c, nil); err != nil {
				return nil, err
			}
		}
		var j *journal
		var ws, rest []write
		var err error
		if s.needsJournal(c, p) {
			j, ws, rest, err = s.journalOf(p)
		} else {
			ws, rest, err = s.batchOf(p)
		}
		if err != nil {
			return nil, err
		}
		last, err := s.publish(ctx, ws)
		var rej *rejection
		switch {
		case err == nil:
			s.committed(p, ws, last)
			s.collect(ctx, rest)
			if j != nil {
				s.journaled(j)
			}
			return j, nil
		case errors.As(err, &rej) && rej.conflict() && try < conflictRetries:
			// Another writer changed a key since this Store last saw it:
			// learn the keys' revisions and plan the change again.
			if err := s.refresh(ctx, p.writes); err != nil {
				return nil, err
			}
			p = nil
		case errors.As(err, &rej) && rej.conflict():
			return nil, fmt.Errorf("%w: %w", ErrConflict, err)
		case errors.As(err, &rej):
			return nil, err // refused: nothing was written
		default:
			// The batch may or may not have been committed: forget what
			// this Store knows, so that the next call reads it again.
			s.indexed = false
			return nil, err
		}
	}
}

// prepare plans c against the bucket as this Store knows it, reading the
// bucket first if the index does not mirror it, and the keys of the
// messages c accepts that the index says are pending. enc is the
// encoding of c's records, or nil to make it here. Called with s.mu held.
func (s *Store) prepare(ctx context.Context, c *store.Change, enc *encoding) (*plan, error) {
	if !s.indexed {
		ctx, cancel := s.bound(ctx)
		defer cancel()
		if _, err := s.scan(ctx); err != nil {
			return nil, err
		}
	}
	if enc == nil {
		var err error
		if enc, err = encode(c); err != nil {
			return nil, err
		}
	}
	if err := s.confirmPending(ctx, enc.pending); err != nil {
		return nil, err
	}
	return s.plan(c, enc)
}

// writeHeaders is the room a write's headers take at most in a message.
const writeHeaders = 1024

// batchOf returns the writes of p's batch and the deletions of dropped
// history messages left for later: those ride along in the batch if there
// is room (they are not part of the state, so they may also follow). A
// change whose own writes are over Options.MaxBatch is refused.
func (s *Store) batchOf(p *plan) (ws, rest []write, err error) {
	if len(p.writes) > s.opts.MaxBatch {
		return nil, nil, fmt.Errorf("natsstore: the change needs %d writes, over the limit of %d for one atomic batch", len(p.writes), s.opts.MaxBatch)
	}
	// Refused here, rather than by the client once part of a batch is
	// sent: a write whose outcome is unknown fences the store.
	limit := s.nc.MaxPayload() - writeHeaders
	for _, w := range p.writes {
		if int64(len(w.data)) > limit {
			return nil, nil, fmt.Errorf("natsstore: a record of %d bytes is over the %d the server takes in one message (its max_payload, less %d for headers)", len(w.data), limit, writeHeaders)
		}
	}
	room := min(len(p.garbage), s.opts.MaxBatch-len(p.writes))
	return append(p.writes, p.garbage[:room]...), p.garbage[room:], nil
}

// committed updates the index after ws were written, the last at
// revision last.
func (s *Store) committed(p *plan, ws []write, last uint64) {
	base := last - uint64(len(ws)) + 1
	var now time.Time
	if s.exp < len(s.expiring) {
		now = time.Now()
	}
	for i, w := range ws {
		if w.ends != nil {
			s.ended(w.ends)
		}
		if !w.cas {
			continue
		}
		seq := base + uint64(i)
		switch {
		case w.del:
			if now.IsZero() {
				now = time.Now()
			}
			s.deleted(w.key, seq, now.Add(s.opts.MarkerTTL))
		case w.first != 0:
			s.setRev(w.key, rev{seq: seq, first: w.first, live: true})
		default:
			s.setRev(w.key, rev{seq: seq, first: seq, live: true})
		}
		if s.opts.Fence && strings.HasPrefix(w.key, prefixPending) {
			s.notePresent(w.key, seq) // after the index, which it reads
		}
	}
	s.top = max(s.top, last)
	for id, h := range p.heads {
		s.heads[id] = h
	}
	for _, id := range p.gone {
		delete(s.heads, id)
	}
	if !now.IsZero() {
		s.forgetExpired(now)
	}
}

// collect deletes the keys of history messages dropped by a change that
// has been recorded, in batches of their own. They are not part of the
// state (Load reads a history's messages from its head's range only), so
// a failure is only logged.
func (s *Store) collect(ctx context.Context, garbage []write) {
	for len(garbage) > 0 {
		n := min(len(garbage), s.opts.MaxBatch)
		if _, err := s.publish(ctx, garbage[:n]); err != nil {
			s.log.Warn("natsstore: removing dropped history messages", "bucket", s.opts.Bucket, "keys", len(garbage), "err", err)
			return
		}
		garbage = garbage[n:]
	}
}

// PutArtifact stores data in the object store and then creates the
// artifact's key, whose creation is the commit point: of two puts of one
// id, in this process or another, one creates the key and the other fails
// with an error wrapping [store.ErrExists].
func (s *Store) PutArtifact(ctx context.Context, a store.Artifact, data []byte) error {
	ctx, done, err := s.begin(ctx)
	if err != nil {
		return err
	}
	defer done()

	key := artifactKey(a.ID)
	if _, err := s.kv.Get(ctx, key); err == nil {
		return fmt.Errorf("%w: artifact %q", store.ErrExists, a.ID)
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("natsstore: %w", err)
	}
	rec := artifactRec{ID: a.ID, Name: a.Name, MediaType: a.MediaType, CreatedBy: a.CreatedBy, Size: a.Size, CreatedAt: a.CreatedAt,
		Object: tok(a.ID) + "." + newID()}
	value, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("natsstore: encoding artifact %q: %w", a.ID, err)
	}
	if _, err := s.obs.PutBytes(ctx, rec.Object, data); err != nil {
		return fmt.Errorf("natsstore: storing artifact %q: %w", a.ID, err)
	}
	if err := s.createArtifactKey(ctx, key, value); err != nil {
		// The content is nobody's: remove it, on a context of its own, as
		// ctx may be what failed.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.Timeout)
		defer cancel()
		if derr := s.obs.Delete(dctx, rec.Object); derr != nil {
			s.log.Warn("natsstore: removing the content of an artifact not stored", "artifact", a.ID, "err", derr)
		}
		if errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("%w: artifact %q", store.ErrExists, a.ID)
		}
		return fmt.Errorf("natsstore: storing artifact %q: %w", a.ID, err)
	}
	return nil
}

// GetArtifact returns an artifact's metadata and content, or an error
// wrapping [store.ErrNotFound].
func (s *Store) GetArtifact(ctx context.Context, id string) (store.Artifact, []byte, error) {
	ctx, done, err := s.begin(ctx)
	if err != nil {
		return store.Artifact{}, nil, err
	}
	defer done()

	e, err := s.kv.Get(ctx, artifactKey(id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return store.Artifact{}, nil, fmt.Errorf("%w: artifact %q", store.ErrNotFound, id)
	}
	if err != nil {
		return store.Artifact{}, nil, fmt.Errorf("natsstore: %w", err)
	}
	var rec artifactRec
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return store.Artifact{}, nil, fmt.Errorf("%w: artifact %q: %w", ErrCorrupt, id, err)
	}
	data, err := s.obs.GetBytes(ctx, rec.Object)
	if err != nil {
		return store.Artifact{}, nil, fmt.Errorf("natsstore: reading artifact %q: %w", id, err)
	}
	a := store.Artifact{ID: rec.ID, Name: rec.Name, MediaType: rec.MediaType, CreatedBy: rec.CreatedBy, Size: rec.Size, CreatedAt: rec.CreatedAt}
	return a, data, nil
}

// newID returns a random id of 22 characters, for batches and objects.
func newID() string {
	var b [16]byte
	rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// scan reads the bucket's last value of every key into a State, and
// rebuilds the index from it. Called with s.mu held.
func (s *Store) scan(ctx context.Context) (store.State, error) {
	entries, err := s.entries(ctx)
	if err != nil {
		return store.State{}, err
	}
	var (
		st       store.State
		revs     = make(map[string]rev)
		heads    = make(map[string]headRec)
		roles    []ordered[store.Role]
		agents   []ordered[store.Agent]
		requests []ordered[store.Request]
		contacts = make(map[string][]ordered[store.Contact])
		histMsgs = make(map[string]map[uint64][]byte)
		regs     = make(map[string]*registry)
		top      uint64
		expiring []expiry
	)
	journals, hidden, err := readJournals(entries)
	if err != nil {
		return store.State{}, err
	}
	ends, err := readEnds(entries)
	if err != nil {
		return store.State{}, err
	}
	var present []keyRev
	for _, e := range entries {
		key, seq := e.Key(), e.Revision()
		top = max(top, seq)
		pending := strings.HasPrefix(key, prefixPending)
		if pending {
			present = append(present, keyRev{key, seq})
		}
		switch {
		case key == keyFence, key == keySync, strings.HasPrefix(key, prefixEnds):
			continue
		case pending && ends[key] == seq && e.Operation() == jetstream.KeyValuePut:
			revs[key] = rev{seq: seq} // ended
			continue
		case hidden[key] == seq && seq != 0:
			revs[key] = rev{seq: seq} // removed: the journal's cleanup deletes it
			continue
		case strings.HasPrefix(key, prefixArtifact):
			continue
		case strings.HasPrefix(key, prefixHistMsg):
			if e.Operation() != jetstream.KeyValuePut {
				continue
			}
			agent, n, err := parseHistMsgKey(key)
			if err != nil {
				return store.State{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
			}
			if histMsgs[agent] == nil {
				histMsgs[agent] = make(map[uint64][]byte)
			}
			histMsgs[agent][n] = e.Value()
			continue
		}
		if e.Operation() != jetstream.KeyValuePut {
			revs[key] = rev{seq: seq}
			expiring = append(expiring, expiry{key, seq, e.Created().Add(s.opts.MarkerTTL)})
			continue
		}
		data := e.Value()
		var first uint64
		var err error
		switch {
		case strings.HasPrefix(key, prefixRole):
			var r roleRec
			if err = json.Unmarshal(data, &r); err == nil {
				first = cmp.Or(r.First, seq)
				roles = append(roles, ordered[store.Role]{first, r.record()})
			}
		case strings.HasPrefix(key, prefixAgent):
			var a agentRec
			if err = json.Unmarshal(data, &a); err == nil {
				first = cmp.Or(a.First, seq)
				agents = append(agents, ordered[store.Agent]{first, a.record()})
			}
		case strings.HasPrefix(key, prefixContact):
			var c contactRec
			if err = json.Unmarshal(data, &c); err == nil {
				first = cmp.Or(c.First, seq)
				contacts[c.Owner] = append(contacts[c.Owner], ordered[store.Contact]{first, c.record()})
				owner := ownerTok(key)
				if regs[owner] == nil {
					regs[owner] = &registry{}
				}
				regs[owner].keys = append(regs[owner].keys, key)
			}
		case strings.HasPrefix(key, prefixRequest):
			var r requestRec
			if err = json.Unmarshal(data, &r); err == nil {
				first = cmp.Or(r.First, seq)
				requests = append(requests, ordered[store.Request]{first, r.record()})
			}
		case strings.HasPrefix(key, prefixPending):
			var m messageRec
			if err = json.Unmarshal(data, &m); err == nil {
				st.Pending = append(st.Pending, m.record())
			}
		case strings.HasPrefix(key, prefixState):
			var e stateRec
			if err = json.Unmarshal(data, &e); err == nil {
				st.States = append(st.States, e.record())
			}
		case strings.HasPrefix(key, prefixHead):
			var h headRec
			if err = json.Unmarshal(data, &h); err == nil {
				heads[h.AgentID] = h
			}
		case strings.HasPrefix(key, prefixJournal):
			// Read by readJournals.
		default:
			err = errors.New("unknown kind of key")
		}
		if err != nil {
			return store.State{}, fmt.Errorf("%w: key %q: %w", ErrCorrupt, key, err)
		}
		revs[key] = rev{seq: seq, first: first, live: true}
	}

	st.Roles = inOrder(roles)
	st.Agents = inOrder(agents)
	st.Requests = inOrder(requests)
	for owner, list := range contacts {
		if st.Contacts == nil {
			st.Contacts = make(map[string][]store.Contact, len(contacts))
		}
		st.Contacts[owner] = inOrder(list)
	}
	slices.SortFunc(st.Pending, func(a, b store.Message) int {
		return cmp.Or(cmp.Compare(a.Seq, b.Seq), strings.Compare(a.ID, b.ID))
	})
	slices.SortFunc(st.States, func(a, b store.StateEntry) int {
		return cmp.Or(strings.Compare(a.Scope, b.Scope), strings.Compare(a.Key, b.Key))
	})
	for _, h := range heads {
		hist := store.History{AgentID: h.AgentID, Summary: h.Summary, Dropped: h.Dropped}
		for n := h.Lo; n < h.Hi; n++ {
			m, ok := histMsgs[h.AgentID][n]
			if !ok {
				return store.State{}, fmt.Errorf("%w: the history of %q lacks its message %d", ErrCorrupt, h.AgentID, n)
			}
			hist.Messages = append(hist.Messages, raw(m))
		}
		st.Histories = append(st.Histories, hist)
	}
	slices.SortFunc(st.Histories, func(a, b store.History) int { return strings.Compare(a.AgentID, b.AgentID) })

	s.revs, s.heads, s.registries, s.top, s.indexed = revs, heads, regs, top, true
	s.journals, s.hidden = journals, hidden
	for key, seq := range ends {
		if revs[key].seq != seq || revs[key].live {
			delete(ends, key) // purged, or written again since
		}
	}
	slices.SortFunc(present, func(a, b keyRev) int { return cmp.Compare(a.Rev, b.Rev) })
	if !s.opts.Fence {
		present = nil // only a fenced store sweeps
	}
	s.ends, s.present, s.sinceSweep, s.swept = ends, present, len(ends), 0
	s.compactAt = 2 * len(present)
	s.scans++
	s.sweepWanted.Store(s.sweepDue())
	slices.SortFunc(expiring, func(a, b expiry) int { return a.at.Compare(b.at) })
	s.expiring, s.exp = expiring, 0
	return st, nil
}

// keySync is the key scan writes on a bucket of several replicas.
const keySync = "sync"

// entries returns the last entry of every key of the bucket.
//
// On a bucket of several replicas, the watcher that reads it may be served
// by a replica that has not yet applied the last writes (the server places
// it on any of them): entries first writes keySync, and reads the
// watcher's updates after its first values until it has seen that write.
// The replica applies the writes in order, so it has then given every
// write made before, and the entries are as of that write. With the fence,
// the write is fenced as any other: a deposed store reads nothing.
func (s *Store) entries(ctx context.Context) (map[string]jetstream.KeyValueEntry, error) {
	var mark uint64
	if s.replicated {
		var err error
		if mark, err = s.publish(ctx, []write{{key: keySync, data: []byte("{}")}}); err != nil {
			return nil, fmt.Errorf("natsstore: marking where to read the bucket: %w", err)
		}
	}
	w, err := s.kv.WatchAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("natsstore: reading the bucket: %w", err)
	}
	defer w.Stop()
	out := make(map[string]jetstream.KeyValueEntry)
	first := false // the watcher gave every key's value it had
	for !first || mark != 0 {
		var e jetstream.KeyValueEntry
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case u, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("natsstore: reading the bucket: the watcher stopped")
			}
			e = u
		}
		if e == nil {
			first = true
			continue
		}
		if e.Key() == keySync && e.Revision() >= mark {
			mark = 0
		}
		if old, ok := out[e.Key()]; !ok || old.Revision() < e.Revision() {
			out[e.Key()] = e
		}
	}
	return out, nil
}

// ordered is a record with the revision that orders it.
type ordered[T any] struct {
	first uint64
	rec   T
}

// inOrder returns the records of list in the order of their creation.
func inOrder[T any](list []ordered[T]) []T {
	slices.SortFunc(list, func(a, b ordered[T]) int { return cmp.Compare(a.first, b.first) })
	out := make([]T, len(list))
	for i, o := range list {
		out[i] = o.rec
	}
	return out
}

// refresh reads the current revision of the keys ws writes with
// compare-and-set, and the heads among them, into the index. Called with
// s.mu held, after a batch lost a compare-and-set.
func (s *Store) refresh(ctx context.Context, ws []write) error {
	for _, w := range ws {
		if !w.cas {
			continue
		}
		m, err := s.stream.GetLastMsgForSubject(ctx, s.prefix+w.key)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			s.forget(w.key)
			if strings.HasPrefix(w.key, prefixHead) {
				delete(s.heads, w.headOf)
			}
			continue
		case err != nil:
			return fmt.Errorf("natsstore: %w", err)
		}
		op := m.Header.Get("KV-Operation")
		if op == "" && s.ends[w.key] == m.Sequence {
			s.setRev(w.key, rev{seq: m.Sequence}) // ended
			continue
		}
		if op != "" || s.hidden[w.key] == m.Sequence {
			// Deleted, or removed by a journal.
			if op != "" {
				s.deleted(w.key, m.Sequence, m.Time.Add(s.opts.MarkerTTL))
			} else {
				s.setRev(w.key, rev{seq: m.Sequence})
			}
			if strings.HasPrefix(w.key, prefixHead) {
				delete(s.heads, w.headOf) // removed
			}
			continue
		}
		r := rev{seq: m.Sequence, first: m.Sequence, live: true}
		switch {
		case strings.HasPrefix(w.key, prefixHead):
			var h headRec
			if err := json.Unmarshal(m.Data, &h); err != nil {
				return fmt.Errorf("%w: key %q: %w", ErrCorrupt, w.key, err)
			}
			s.heads[h.AgentID] = h
		case w.ordered:
			first, err := firstOf(m.Data)
			if err != nil {
				return fmt.Errorf("%w: key %q: %w", ErrCorrupt, w.key, err)
			}
			r.first = cmp.Or(first, m.Sequence)
		}
		s.setRev(w.key, r)
	}
	return nil
}

// confirmPending reads again from the bucket the keys of pending
// messages (those of the messages a change accepts) that the index says
// are pending, so that a message another writer finished since is not
// refused. Called with s.mu held.
func (s *Store) confirmPending(ctx context.Context, keys []string) error {
	var stale []write
	for _, key := range keys {
		if s.revs[key].live {
			stale = append(stale, write{key: key, cas: true})
		}
	}
	if len(stale) == 0 {
		return nil
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	return s.refresh(ctx, stale)
}

// createArtifactKey creates an artifact's key, failing with an error
// wrapping jetstream.ErrKeyExists if it exists. With Options.Fence it is
// written through publish, which keeps the fence.
func (s *Store) createArtifactKey(ctx context.Context, key string, value []byte) error {
	if !s.opts.Fence {
		_, err := s.kv.Create(ctx, key, value)
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.quiesce() // publish expects the stream's last sequence to be s.last
	_, err := s.publish(ctx, []write{{key: key, data: value, cas: true}})
	if rej := (*rejection)(nil); errors.As(err, &rej) && rej.conflict() {
		return jetstream.ErrKeyExists
	}
	return err
}
