package filestore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"agentsociety/store"
)

// ErrLocked is returned, wrapped, by [Open] when another Store, in this
// process or another, has the directory open.
var ErrLocked = errors.New("filestore: directory is locked")

// ErrClosed is returned, wrapped, by the methods of a closed [Store].
var ErrClosed = errors.New("filestore: store is closed")

// ErrCorrupt is returned, wrapped, by [Open] when a file in the directory
// is damaged in a way no crash explains: a snapshot whose checksum does not
// match its content, or that does not parse; a journal record that is
// damaged although intact records follow it (bit rot, not a torn write);
// a journal that lacks records the snapshots need, or that only snapshots
// now missing held. The error names the file and, in the journal, the byte
// offset of the damaged record; Open leaves the file as it found it. [Store.GetArtifact] wraps it too, for an
// artifact whose content or metadata is damaged.
var ErrCorrupt = errors.New("filestore: corrupt file")

// ErrInvalidArtifactID is returned, wrapped, for an artifact id the store
// refuses; see the package documentation. GetArtifact wraps
// [store.ErrNotFound] too, since no artifact can have such an id.
var ErrInvalidArtifactID = errors.New("filestore: invalid artifact id")

// SyncMode says when the journal is synced to stable storage.
type SyncMode int

const (
	// SyncEveryRecord makes Apply return only after its record is on
	// stable storage. Concurrent Applies share a sync. It is the default.
	SyncEveryRecord SyncMode = iota

	// SyncBatched makes Apply return once its record is written, which a
	// crash of the process does not lose; a background goroutine syncs at
	// most Options.SyncInterval later, so a crash of the machine may lose
	// up to that much.
	SyncBatched
)

// String returns the mode's name.
func (m SyncMode) String() string {
	switch m {
	case SyncEveryRecord:
		return "SyncEveryRecord"
	case SyncBatched:
		return "SyncBatched"
	}
	return fmt.Sprintf("SyncMode(%d)", int(m))
}

// Defaults for the zero fields of [Options].
const (
	DefaultSyncInterval      = 100 * time.Millisecond
	DefaultCompactAfter      = 10_000
	DefaultCompactAfterBytes = 64 << 20
)

// Options configures a [Store]. The zero value is ready to use.
type Options struct {
	// Sync says when Apply's records reach stable storage; the default is
	// SyncEveryRecord.
	Sync SyncMode

	// SyncInterval bounds, under SyncBatched, how long after a write its
	// sync may come. Zero means DefaultSyncInterval.
	SyncInterval time.Duration

	// CompactAfter is the number of journal records past which the store
	// writes fresh snapshots and restarts the journal, in the background;
	// it waits, though, until the journal is at least as large as the last
	// snapshots, so that rewriting them costs each Apply a bounded share
	// however large the state grows. Zero means DefaultCompactAfter; a
	// negative number turns this trigger off.
	CompactAfter int

	// CompactAfterBytes is the journal size past which the store compacts,
	// as for CompactAfter. Zero means DefaultCompactAfterBytes; a negative
	// number turns this trigger off. With both triggers off the store
	// compacts only on Close.
	CompactAfterBytes int64

	// Logger receives what the store cannot return: a torn journal tail
	// cut at Open, a background sync or compaction that failed. Nil means
	// slog.Default().
	Logger *slog.Logger
}

// Store is a durable [store.Store] on a directory; see the package
// documentation for its layout and guarantees. It is safe for concurrent
// use. Make one with [Open] and release it with [Store.Close].
type Store struct {
	dir  string
	opts Options
	log  *slog.Logger
	lock *os.File

	// closeMu is held for reading by every call in progress and for writing
	// by Close, so that Close waits for them and nothing touches the
	// directory after Close returns.
	closeMu sync.RWMutex
	closed  bool

	// mu orders the journal: records are checked, written and applied to
	// mems under it, so the journal's order is the state's.
	mu sync.Mutex
	// mems holds the state, mems[i] the part parts[i] (see part): each
	// change is applied to them one after the other, under mu, and the
	// state is read from them under mu.
	mems      [len(parts)]*store.Memory
	pending   map[string]struct{} // ids of pending messages, to refuse a change before writing it
	journal   *os.File            // opened with O_APPEND
	lsn       uint64              // number of the last record written
	size      int64               // bytes in journal
	records   int64               // records in journal past the snapshots
	snapBytes int64               // size of the last snapshots
	haveSnap  bool                // whether snapshots exist
	retryAt   uint64              // no automatic compaction before this lsn (after a failure)
	busy      bool                // a compaction is requested or running
	err       error               // set when the disk may no longer match mems
	frame     []byte              // reused to build records

	// events is the event log, with a lock of its own: it never waits
	// for the journal (see events.go).
	events eventLog

	// syncMu guards the journal's syncs: at most one runs at a time
	// (syncing), outside the lock, and callers whose records it does not
	// cover wait on syncCond for the next, which covers every record
	// written meanwhile (group commit). Holding syncMu with syncing false
	// keeps the journal file from being synced, so that it can be
	// replaced or closed. Lock order: syncMu before mu.
	syncMu   sync.Mutex
	syncCond sync.Cond
	syncing  bool
	synced   uint64 // number of the last record on stable storage
	syncErr  error  // a sync failed; every later one fails
	syncs    int64  // syncs started, for benchmarks

	compactMu sync.Mutex // one compaction at a time

	artifactMu [16]sync.Mutex // PutArtifact, by the first byte of the id's hash

	kick    chan struct{} // a write happened (SyncBatched)
	compact chan struct{} // compaction is due
	stop    chan struct{}
	wg      sync.WaitGroup
}

var _ store.Store = (*Store)(nil)

// Open opens the store in dir, creating the directory if needed, and
// recovers its state: it loads the snapshots and replays the journal,
// cutting off a torn tail (a last record that a crash cut short). It fails
// with an error wrapping [ErrLocked] if the directory is open elsewhere, and
// with one wrapping [ErrCorrupt], naming the file, if a snapshot's checksum
// does not match or it does not parse, if a damaged journal record is
// followed by intact ones, or if the journal does not follow the snapshots.
func Open(dir string, opts Options) (*Store, error) {
	switch {
	case opts.Sync != SyncEveryRecord && opts.Sync != SyncBatched:
		return nil, fmt.Errorf("filestore: unknown sync mode %v", opts.Sync)
	case opts.SyncInterval < 0:
		return nil, fmt.Errorf("filestore: negative sync interval %v", opts.SyncInterval)
	}
	if opts.SyncInterval == 0 {
		opts.SyncInterval = DefaultSyncInterval
	}
	if opts.CompactAfter == 0 {
		opts.CompactAfter = DefaultCompactAfter
	}
	if opts.CompactAfterBytes == 0 {
		opts.CompactAfterBytes = DefaultCompactAfterBytes
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}

	// The host may change the working directory while the store is open.
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("filestore: %w", err)
	}
	if _, err := os.Stat(dir); err != nil {
		// Every directory made, not only the last, must be durable in its
		// parent.
		var made []string
		for d := dir; ; d = filepath.Dir(d) {
			if _, err := os.Stat(d); err == nil || filepath.Dir(d) == d {
				break
			}
			made = append(made, d)
		}
		if err := os.MkdirAll(dir, dirMode); err != nil {
			return nil, fmt.Errorf("filestore: %w", err)
		}
		for _, d := range made {
			if err := syncDir(filepath.Dir(d)); err != nil {
				return nil, fmt.Errorf("filestore: %w", err)
			}
		}
	}
	lock, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|os.O_CREATE, fileMode)
	if err != nil {
		return nil, fmt.Errorf("filestore: %w", err)
	}
	if err := lockFile(lock); err != nil {
		lock.Close()
		return nil, err
	}
	s := &Store{
		dir:     dir,
		opts:    opts,
		log:     log,
		lock:    lock,
		pending: make(map[string]struct{}),
		kick:    make(chan struct{}, 1),
		compact: make(chan struct{}, 1),
		stop:    make(chan struct{}),
	}
	s.syncCond.L = &s.syncMu
	for i := range s.mems {
		s.mems[i] = store.NewMemory()
	}
	if err := s.recover(); err != nil {
		if s.journal != nil {
			s.journal.Close()
		}
		lock.Close()
		return nil, err
	}
	s.wg.Go(s.compactLoop)
	if opts.Sync == SyncBatched {
		s.wg.Go(s.flushLoop)
	}
	return s, nil
}

// recover loads the snapshots and replays the journal into s.
func (s *Store) recover() error {
	// The directories are synced before the store is used, whatever this
	// Open changed in them: a process killed between a rename (of the
	// journal, a snapshot, a sidecar) and its directory's sync leaves an
	// entry that looks like any other and may not be durable.
	arts := filepath.Join(s.dir, artifactsName)
	if err := os.MkdirAll(arts, dirMode); err != nil {
		return fmt.Errorf("filestore: %w", err)
	}
	// The event log's directory is made here, so that its entry is synced
	// with the others before an event is acknowledged in it.
	if err := os.MkdirAll(filepath.Join(s.dir, eventsName), dirMode); err != nil {
		return fmt.Errorf("filestore: %w", err)
	}
	names := []string{journalName}
	for _, p := range parts {
		names = append(names, p.name)
	}
	if _, err := removeTemps(s.dir, names...); err != nil {
		return fmt.Errorf("filestore: removing temporary files: %w", err)
	}
	if _, err := removeTemps(arts); err != nil {
		return fmt.Errorf("filestore: removing temporary files: %w", err)
	}

	seqs, have := make([]uint64, len(parts)), make([]bool, len(parts))
	s.haveSnap = true
	for i, p := range parts {
		path := filepath.Join(s.dir, p.name)
		file := p.file()
		ok, n, err := readSnapshot(path, file)
		if err != nil {
			return err
		}
		if ok {
			if c := file.change(); !c.Empty() {
				if err := applyLoaded(s.mems[i], &c); err != nil {
					return fmt.Errorf("filestore: %s: %w", path, err)
				}
			}
			seqs[i] = file.header().JournalSeq
		}
		have[i] = ok
		s.haveSnap = s.haveSnap && ok
		s.snapBytes += n
	}

	jpath := filepath.Join(s.dir, journalName)
	var err error
	s.journal, err = os.OpenFile(jpath, os.O_RDWR|os.O_CREATE|os.O_APPEND, fileMode)
	if err != nil {
		return fmt.Errorf("filestore: %w", err)
	}
	size, last, records, err := replay(s.journal, jpath, s.mems[:], seqs, have, s.log)
	if err != nil {
		return err
	}
	s.size, s.records = size, records
	s.lsn = max(slices.Max(seqs), last)
	s.synced = s.lsn

	st, err := s.state()
	if err != nil {
		return err
	}
	for _, m := range st.Pending {
		s.pending[m.ID] = struct{}{}
	}
	// Make the directories' entries (the journal's creation, the
	// temporary files' removal, renames a killed process left unsynced)
	// durable before anything is built on them.
	for _, d := range []string{s.dir, arts} {
		if err := syncDir(d); err != nil {
			return fmt.Errorf("filestore: %w", err)
		}
	}
	return nil
}

// enter starts a call, or reports that the store is closed. The caller
// calls s.closeMu.RUnlock when done, if enter returned nil.
func (s *Store) enter() error {
	s.closeMu.RLock()
	if s.closed {
		s.closeMu.RUnlock()
		return ErrClosed
	}
	return nil
}

// Load returns the state: the snapshots and the journal as of Open, and
// every change applied since. Applies wait for it.
func (s *Store) Load(ctx context.Context) (store.State, error) {
	if err := ctx.Err(); err != nil {
		return store.State{}, err
	}
	if err := s.enter(); err != nil {
		return store.State{}, err
	}
	defer s.closeMu.RUnlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return store.State{}, s.err
	}
	return s.state()
}

// state returns the state its parts hold. s.mu is held, or s is being
// opened.
func (s *Store) state() (store.State, error) {
	var st store.State
	for i, p := range parts {
		ps, err := s.mems[i].Load(context.Background())
		if err != nil {
			return store.State{}, err
		}
		p.from(&st, &ps)
	}
	return st, nil
}

// Apply appends c to the journal as one record and applies it; see
// [store.Store]. Under SyncEveryRecord it returns once the record is on
// stable storage. A context cancelled before Apply starts fails it; once
// the record is written Apply waits for its sync whatever the context says,
// so that an error always means the change did not happen (or, for an I/O
// error, that the store now refuses further changes).
func (s *Store) Apply(ctx context.Context, c store.Change) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.closeMu.RUnlock()
	if c.Empty() {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.err
	}
	nc, err := normalize(&c)
	if err != nil {
		return err
	}
	e := getEncoder()
	defer putEncoder(e)
	j := changeToJSON(&nc)
	body, err := e.encode(&j)
	if err != nil {
		return fmt.Errorf("filestore: encoding the change: %w", err)
	}
	if len(body) > maxRecord-64 {
		return fmt.Errorf("filestore: the change takes %d bytes, over the limit of %d", len(body), maxRecord-64)
	}

	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return s.err
	}
	if err := s.checkAccepted(nc.Accepted); err != nil {
		s.mu.Unlock()
		return err
	}
	lsn := s.lsn + 1
	if lsn > maxLSN {
		s.mu.Unlock()
		return fmt.Errorf("filestore: the journal has reached its last record number")
	}
	s.frame = appendFrame(s.frame[:0], lsn, body)
	if _, err := s.journal.Write(s.frame); err != nil {
		err = fmt.Errorf("filestore: writing the journal: %w", err)
		// Undo a partial write, so that the next record follows the last
		// good one; if that fails too, the journal's end is unknown.
		if terr := s.journal.Truncate(s.size); terr != nil {
			s.fail(fmt.Errorf("%w; cutting off the partial record: %w", err, terr))
		}
		s.mu.Unlock()
		return err
	}
	s.lsn = lsn
	s.size += int64(len(s.frame))
	s.records++
	if cap(s.frame) > 1<<20 {
		s.frame = nil // don't keep a large change's buffer around
	}
	var pc store.Change
	for i := range parts {
		if !partOf(i, &nc, &pc) {
			continue
		}
		if err := s.mems[i].Apply(context.Background(), pc); err != nil {
			// checkAccepted and normalize make this impossible; if it
			// happens anyway the journal holds a change the state
			// does not.
			s.fail(fmt.Errorf("filestore: applying a journaled change: %w", err))
			s.mu.Unlock()
			return s.err
		}
	}
	for _, m := range nc.Accepted {
		s.pending[m.ID] = struct{}{}
	}
	for _, id := range nc.Finished {
		delete(s.pending, id)
	}
	due := s.compactionDue()
	s.mu.Unlock()

	if due {
		select {
		case s.compact <- struct{}{}:
		default:
		}
	}
	if s.opts.Sync == SyncEveryRecord {
		return s.syncTo(lsn)
	}
	select {
	case s.kick <- struct{}{}:
	default:
	}
	return nil
}

// checkAccepted reports an error wrapping store.ErrExists if a message in
// msgs is pending or appears twice in msgs. s.mu is held.
func (s *Store) checkAccepted(msgs []store.Message) error {
	for i, m := range msgs {
		if _, ok := s.pending[m.ID]; ok {
			return fmt.Errorf("filestore: %w: message %q is pending", store.ErrExists, m.ID)
		}
		for _, prev := range msgs[:i] {
			if prev.ID == m.ID {
				return fmt.Errorf("filestore: %w: message %q accepted twice in one change", store.ErrExists, m.ID)
			}
		}
	}
	return nil
}

// fail records err as the reason the store refuses further changes. s.mu is
// held.
func (s *Store) fail(err error) {
	if s.err == nil {
		s.err = fmt.Errorf("filestore: refusing changes until reopened: %w", err)
		s.log.Error("filestore: the store failed", slog.String("dir", s.dir), slog.Any("error", err))
	}
}

// syncTo returns once record lsn is on stable storage. If a sync is in
// progress it waits for it, and if that did not cover lsn, one of the
// waiters syncs everything written by then (group commit).
func (s *Store) syncTo(lsn uint64) error {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	for s.synced < lsn {
		if s.syncErr != nil {
			return s.syncErr
		}
		if s.syncing {
			s.syncCond.Wait()
			continue
		}
		s.mu.Lock()
		if s.err != nil {
			defer s.mu.Unlock()
			return s.err
		}
		target, f := s.lsn, s.journal
		s.mu.Unlock()
		s.syncing = true
		s.syncs++
		s.syncMu.Unlock()
		err := datasync(f)
		s.syncMu.Lock()
		s.syncing = false
		s.syncCond.Broadcast()
		if err != nil {
			s.mu.Lock()
			s.fail(fmt.Errorf("syncing the journal: %w", err))
			s.syncErr = s.err
			s.mu.Unlock()
			return s.syncErr
		}
		s.synced = max(s.synced, target)
	}
	return nil
}

// lockSyncs locks syncMu once no sync is in progress: until syncMu is
// unlocked, nothing syncs the journal file.
func (s *Store) lockSyncs() {
	s.syncMu.Lock()
	for s.syncing {
		s.syncCond.Wait()
	}
}

// flushLoop syncs the journal under SyncBatched: at most SyncInterval after
// the first write that follows a sync.
func (s *Store) flushLoop() {
	t := time.NewTimer(0)
	if !t.Stop() {
		<-t.C
	}
	for {
		select {
		case <-s.stop:
			return
		case <-s.kick:
		}
		t.Reset(s.opts.SyncInterval)
		select {
		case <-s.stop:
			t.Stop()
			return // Close syncs.
		case <-t.C:
		}
		s.mu.Lock()
		lsn := s.lsn
		s.mu.Unlock()
		if err := s.syncTo(lsn); err != nil {
			s.log.Error("filestore: background sync failed", slog.String("dir", s.dir), slog.Any("error", err))
		}
	}
}

// compactionDue reports whether Apply should ask for a compaction, and if
// so notes that one is asked for. s.mu is held.
func (s *Store) compactionDue() bool {
	if s.busy || s.lsn < s.retryAt {
		return false
	}
	byRecords := s.opts.CompactAfter > 0 && s.records >= int64(s.opts.CompactAfter)
	byBytes := s.opts.CompactAfterBytes > 0 && s.size >= s.opts.CompactAfterBytes
	// A journal smaller than the snapshots waits: rewriting the snapshots
	// more often than the journal grows by their size would make each
	// Apply pay in proportion to the organisation.
	if (byRecords || byBytes) && s.size >= s.snapBytes {
		s.busy = true
		return true
	}
	return false
}

// compactLoop runs the compactions Apply asks for.
func (s *Store) compactLoop() {
	for {
		select {
		case <-s.stop:
			return
		case <-s.compact:
		}
		if err := s.compactNow(); err != nil {
			s.log.Warn("filestore: compaction failed; the journal keeps everything", slog.String("dir", s.dir), slog.Any("error", err))
		}
	}
}

// compactNow writes the state into fresh snapshots and restarts the journal
// with only the records applied meanwhile.
//
// The order makes every crash recoverable: the journal is synced through
// the snapshots' record first, so that it holds every record any snapshot
// may lack; each snapshot is replaced atomically and names the
// last record it includes; the journal is replaced only once all are
// durable, by a copy of its tail, renamed over it.
func (s *Store) compactNow() (err error) {
	s.compactMu.Lock()
	defer s.compactMu.Unlock()
	defer func() {
		s.mu.Lock()
		s.busy = false
		again := false
		if err != nil {
			// Don't retry on every Apply; wait for as many records again.
			s.retryAt = s.lsn + uint64(max(s.opts.CompactAfter, 1))
		} else {
			// The records applied meanwhile may already be over a
			// trigger, and no Apply may come to ask again.
			again = s.compactionDue()
		}
		s.mu.Unlock()
		if again {
			select {
			case s.compact <- struct{}{}:
			default:
			}
		}
	}()

	s.mu.Lock()
	if s.err != nil {
		defer s.mu.Unlock()
		return s.err
	}
	if s.records == 0 && s.size == markerSize(s.lsn) && s.haveSnap { // as the last compaction left it
		s.mu.Unlock()
		return nil
	}
	st, err := s.state()
	lsn, off := s.lsn, s.size
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if err := s.syncTo(lsn); err != nil {
		return err
	}

	var snapBytes int64
	for _, p := range parts {
		data, err := encodeSnapshot(p.encode(&st, lsn), p.indent)
		if err != nil {
			return fmt.Errorf("encoding %s: %w", p.name, err)
		}
		if err := writeFileAtomic(s.dir, p.name, data); err != nil {
			return fmt.Errorf("writing %s: %w", p.name, err)
		}
		snapBytes += int64(len(data))
	}
	if err := syncDir(s.dir); err != nil {
		return err
	}

	s.lockSyncs()
	defer s.syncMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.haveSnap = true
	s.snapBytes = snapBytes
	if s.err != nil {
		return s.err
	}
	nf, err := s.restartJournal(off, lsn)
	if err != nil {
		return err
	}
	s.journal.Close()
	s.journal = nf
	s.size += markerSize(lsn) - off
	s.records = int64(s.lsn - lsn)
	s.synced = max(s.synced, s.lsn)
	return nil
}

// restartJournal replaces the journal with lsn's marker (see appendMarker)
// followed by a copy of its bytes from off on, synced, and returns the new
// file open for appending. s.mu is held, and s.syncMu with no sync in
// progress. If it fails before the rename, the old journal stays in use; if
// the rename may not be durable, the store fails.
func (s *Store) restartJournal(off int64, lsn uint64) (_ *os.File, err error) {
	jpath := filepath.Join(s.dir, journalName)
	tmp, err := os.CreateTemp(s.dir, journalName+".*"+tmpSuffix)
	if err != nil {
		return nil, err
	}
	tmpPath := tmp.Name()
	var nf *os.File
	defer func() {
		tmp.Close()
		if err != nil {
			if nf != nil {
				nf.Close()
			}
			os.Remove(tmpPath)
		}
	}()
	if err := tmp.Chmod(fileMode); err != nil {
		return nil, err
	}
	if _, err := tmp.Write(appendMarker(nil, lsn)); err != nil {
		return nil, err
	}
	if _, err := io.Copy(tmp, io.NewSectionReader(s.journal, off, s.size-off)); err != nil {
		return nil, fmt.Errorf("copying the journal's tail: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return nil, err
	}
	nf, err = os.OpenFile(tmpPath, os.O_RDWR|os.O_APPEND, fileMode)
	if err != nil {
		return nil, err
	}
	if err := os.Rename(tmpPath, jpath); err != nil {
		return nil, err
	}
	if err := syncDir(s.dir); err != nil {
		// The new journal holds everything, but the directory may still
		// name the old one after a crash: appending to the new one could
		// be lost.
		s.fail(err)
		nf.Close()
		nf = nil
		return nil, err
	}
	return nf, nil
}

// Close compacts the store (writes fresh snapshots and restarts the
// journal with only their marker; nothing to do if nothing was applied
// since the last compaction), syncs it, stops its goroutines and releases
// the directory. It waits for calls in progress; later calls fail with
// ErrClosed. Closing a closed store does nothing. If compaction fails, the
// journal still holds everything and Close returns the error after
// releasing the directory.
func (s *Store) Close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	close(s.stop)
	s.wg.Wait()

	var errs []error
	s.mu.Lock()
	failed := s.err
	s.mu.Unlock()
	if failed != nil {
		errs = append(errs, failed)
	} else if err := s.compactNow(); err != nil {
		errs = append(errs, fmt.Errorf("filestore: compacting on close: %w", err))
		s.mu.Lock()
		lsn := s.lsn
		s.mu.Unlock()
		if err := s.syncTo(lsn); err != nil {
			errs = append(errs, err)
		}
	}
	s.lockSyncs()
	s.mu.Lock()
	if err := s.journal.Close(); err != nil && failed == nil {
		errs = append(errs, fmt.Errorf("filestore: %w", err))
	}
	s.mu.Unlock()
	s.syncMu.Unlock()
	if err := s.closeEvents(); err != nil {
		errs = append(errs, fmt.Errorf("filestore: closing the event log: %w", err))
	}
	if err := s.lock.Close(); err != nil {
		errs = append(errs, fmt.Errorf("filestore: releasing the lock: %w", err))
	}
	return errors.Join(errs...)
}
