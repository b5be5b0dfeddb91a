package filestore

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"

	"agentsociety/store"
)

// frameHeader is the size of a record's length and checksum.
const frameHeader = 8

// maxLSN bounds record numbers, far beyond any journal's life, so that
// they never wrap and stay exact as JSON numbers anywhere.
const maxLSN = 1 << 53

// maxRecord bounds a record's payload, written or read. A length above it
// in a journal is corruption, not a reason to allocate.
const maxRecord = 1 << 30

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// appendFrame appends to dst the record numbered lsn whose change body is
// the JSON object body ("{...}", as encoded from a changeJSON).
func appendFrame(dst []byte, lsn uint64, body []byte) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, frameHeader)...)
	p := len(dst)
	dst = append(dst, `{"lsn":`...)
	dst = strconv.AppendUint(dst, lsn, 10)
	if len(body) > 2 { // not "{}"
		dst = append(dst, ',')
		dst = append(dst, body[1:]...)
	} else {
		dst = append(dst, '}')
	}
	payload := dst[p:]
	binary.LittleEndian.PutUint32(dst[start:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(dst[start+4:], crc32.Checksum(payload, castagnoli))
	return dst
}

// appendMarker appends to dst the journal's marker for lsn: a record
// numbered lsn that holds no change. A compaction starts the new journal
// with it, numbered as the last record the snapshots include, so that the
// journal says where it starts even when no record follows: without its
// snapshots, such a journal is missing records 1 to lsn, and Open refuses
// it instead of opening an empty store. Nothing is appended for lsn 0,
// before any record: there is nothing to lose. replay tells the marker by
// its empty change, which Apply never records, and refuses a journal whose
// marker is past what a snapshot holds: with a single record, the marker
// would otherwise pass for record 1.
func appendMarker(dst []byte, lsn uint64) []byte {
	if lsn == 0 {
		return dst
	}
	return appendFrame(dst, lsn, []byte("{}"))
}

// markerSize is the size of appendMarker's marker for lsn.
func markerSize(lsn uint64) int64 {
	if lsn == 0 {
		return 0
	}
	return int64(frameHeader + len(`{"lsn":}`) + len(strconv.FormatUint(lsn, 10)))
}

// corruptError is a record Open cannot read: the journal is cut before it
// if it is the torn tail, and Open fails if it is not.
type corruptError struct {
	reason string
}

func (e *corruptError) Error() string { return e.reason }

// journalReader reads records from a journal one by one.
type journalReader struct {
	r    *bufio.Reader
	off  int64 // offset of the next record
	size int64 // the file's size
	buf  []byte
}

// next returns the next record and its offset. It returns io.EOF
// at a clean end and a *corruptError for a record that cannot be read.
func (jr *journalReader) next() (rec recordJSON, off int64, err error) {
	off = jr.off
	var hdr [frameHeader]byte
	k, err := io.ReadFull(jr.r, hdr[:])
	if err == io.EOF {
		return rec, off, io.EOF
	}
	if err == io.ErrUnexpectedEOF {
		return rec, off, &corruptError{fmt.Sprintf("a short record header (%d of %d bytes)", k, frameHeader)}
	}
	if err != nil {
		return rec, off, err
	}
	length := binary.LittleEndian.Uint32(hdr[:4])
	sum := binary.LittleEndian.Uint32(hdr[4:])
	left := jr.size - off - frameHeader
	switch {
	case length == 0:
		return rec, off, &corruptError{"a record of length 0"}
	case length > maxRecord:
		return rec, off, &corruptError{fmt.Sprintf("a record length of %d bytes, over the limit", length)}
	case int64(length) > left:
		return rec, off, &corruptError{fmt.Sprintf("a short record (%d of %d bytes)", max(left, 0), length)}
	}
	if cap(jr.buf) < int(length) {
		jr.buf = make([]byte, length)
	}
	payload := jr.buf[:length]
	if _, err := io.ReadFull(jr.r, payload); err != nil {
		if err == io.ErrUnexpectedEOF || err == io.EOF {
			return rec, off, &corruptError{"a short record"}
		}
		return rec, off, err
	}
	if rec, err = decodeRecord(payload, sum); err != nil {
		return rec, off, err
	}
	jr.off += frameHeader + int64(length)
	return rec, off, nil
}

// decodeRecord checks a record's payload against its checksum and decodes
// it, or returns a *corruptError.
func decodeRecord(payload []byte, sum uint32) (rec recordJSON, err error) {
	if got := crc32.Checksum(payload, castagnoli); got != sum {
		return rec, &corruptError{fmt.Sprintf("a bad checksum (%08x, want %08x)", got, sum)}
	}
	if err := json.Unmarshal(payload, &rec); err != nil {
		return rec, &corruptError{fmt.Sprintf("a payload that is not a record: %v", err)}
	}
	if rec.LSN == 0 || rec.LSN > maxLSN {
		return rec, &corruptError{fmt.Sprintf("a payload without a valid sequence number (%d)", rec.LSN)}
	}
	return rec, nil
}

// findIntact looks in f, between offset from and size, for an intact
// record numbered above after: a whole frame whose checksum matches and
// whose payload is a record. It returns the first one's offset and number,
// or ok false if there is none. Every byte offset is tried, not only where
// the damaged record's length points, since the length may be what was
// damaged. Payloads are JSON text, whose bytes are all 0x20 or more, so a
// length read from inside one is at least 512 MiB and is passed over at
// once in any smaller journal; the scan costs little more than a read of
// the rest of the file.
func findIntact(f io.ReaderAt, from, size int64, after uint64) (off int64, lsn uint64, ok bool, err error) {
	win := make([]byte, min(1<<20, max(size-from, 0))) // a window on the file
	var scratch []byte
	for start := from; size-start >= frameHeader; {
		n := int(min(int64(len(win)), size-start))
		if _, err := f.ReadAt(win[:n], start); err != nil {
			return 0, 0, false, err
		}
		for i := 0; i+frameHeader <= n; i++ {
			p := start + int64(i)
			length := binary.LittleEndian.Uint32(win[i:])
			if length == 0 || length > maxRecord || int64(length) > size-p-frameHeader {
				continue
			}
			sum := binary.LittleEndian.Uint32(win[i+4:])
			var payload []byte
			if end := i + frameHeader + int(length); end <= n {
				payload = win[i+frameHeader : end]
			} else {
				// The frame runs past the window: check its checksum
				// as it streams by before reading it whole.
				if scratch == nil {
					scratch = make([]byte, 64<<10)
				}
				h := crc32.New(castagnoli)
				if _, err := io.CopyBuffer(h, io.NewSectionReader(f, p+frameHeader, int64(length)), scratch); err != nil {
					return 0, 0, false, err
				}
				if h.Sum32() != sum {
					continue
				}
				payload = make([]byte, length)
				if _, err := f.ReadAt(payload, p+frameHeader); err != nil {
					return 0, 0, false, err
				}
			}
			if rec, err := decodeRecord(payload, sum); err == nil && rec.LSN > after {
				return p, rec.LSN, true, nil
			}
		}
		// The next window overlaps this one by a header's length less
		// one, so that every offset's header is read whole once.
		start += int64(n - frameHeader + 1)
	}
	return 0, 0, false, nil
}

// replay applies the journal f to the parts of the state, mems[i] holding
// parts[i], skipping for each part the records its snapshot includes:
// seqs[i] for parts[i], 0 where have[i] says there is no snapshot. A torn
// tail is cut off f and logged; a damaged record that intact ones follow is
// an error wrapping ErrCorrupt. A failed replay leaves f as it is. Errors
// name the file, path.
//
// It returns the journal's size after any cut, the last sequence number it
// holds (0 if none), and how many records it holds past the snapshots.
func replay(f *os.File, path string, mems []*store.Memory, seqs []uint64, have []bool, log *slog.Logger) (size int64, last uint64, records int64, err error) {
	fail := func(err error) (int64, uint64, int64, error) {
		return 0, 0, 0, fmt.Errorf("filestore: %s: %w", path, err)
	}
	fi, err := f.Stat()
	if err != nil {
		return fail(err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fail(err)
	}
	jr := &journalReader{r: bufio.NewReaderSize(f, 1<<20), size: fi.Size()}
	base, top := slices.Min(seqs), slices.Max(seqs)
	ctx := context.Background()
	var torn *corruptError // the record at jr.off, the torn tail
	for {
		rec, off, err := jr.next()
		if err == io.EOF {
			break
		}
		var ce *corruptError
		if errors.As(err, &ce) {
			// Torn tail or damage? A crash cuts short only the last
			// write: nothing intact follows a torn record. So if an
			// intact record follows this one, and one that a snapshot
			// lacks, it was written after this one was whole, and this
			// one was damaged since (bit rot, a stray write): cutting
			// here would drop acknowledged records, so Open refuses.
			// Records every snapshot includes are not counted: dropping
			// them loses nothing.
			at, n, found, err := findIntact(f, off+1, fi.Size(), max(last, base))
			if err != nil {
				return fail(fmt.Errorf("looking for intact records after the one at offset %d: %w", off, err))
			}
			if found {
				return 0, 0, 0, fmt.Errorf("%w %s: the record at offset %d is damaged (%s), but an intact record, number %d, follows it at offset %d: "+
					"this is damage to written records, not a write cut short by a crash, and Open does not drop acknowledged records "+
					"(truncating the file to %d bytes would drop every record from that offset on)",
					ErrCorrupt, path, off, ce.reason, n, at, off)
			}
			torn = ce
			jr.off = off
			break
		}
		if err != nil {
			return fail(err)
		}
		if rec.empty() {
			// The marker a compaction starts the journal with (Apply
			// records no empty change): every snapshot holds the
			// records up to it.
			if rec.LSN > base {
				return 0, 0, 0, fmt.Errorf("%w %s: the journal starts after record %d, which every snapshot must hold, but %s: records are missing (is a snapshot missing or older than the journal?)", ErrCorrupt, path, rec.LSN, describeSeqs(seqs, have))
			}
			last = rec.LSN
			continue
		}
		if rec.LSN <= base {
			// Already in every snapshot: the journal was not restarted
			// after they were written.
			last = rec.LSN
			continue
		}
		if want := max(last, base) + 1; rec.LSN != want {
			return 0, 0, 0, fmt.Errorf("%w %s: the record at offset %d is number %d where number %d should follow (%s): records are missing (is a snapshot missing or older than the journal?)", ErrCorrupt, path, off, rec.LSN, want, describeSeqs(seqs, have))
		}
		c := rec.change()
		var pc store.Change
		for i := range parts {
			if rec.LSN <= seqs[i] {
				continue
			}
			if partOf(i, &c, &pc) {
				if err := applyLoaded(mems[i], &pc); err != nil {
					return fail(fmt.Errorf("record %d at offset %d: %w", rec.LSN, off, err))
				}
			}
		}
		last = rec.LSN
		records++
	}
	// A compaction syncs the journal through the records of the snapshots
	// before it writes them, so the journal holds every record an older
	// snapshot lacks; if it does not, something else removed them.
	if base < top && last < top {
		return 0, 0, 0, fmt.Errorf("%w %s: the journal ends at record %d, but %s: records are missing (is a snapshot missing or older than the journal?)", ErrCorrupt, path, last, describeSeqs(seqs, have))
	}
	// Only now that Open will not fail is the torn tail cut off.
	if torn != nil {
		log.LogAttrs(ctx, slog.LevelWarn, "filestore: dropping the journal's torn or corrupt tail",
			slog.String("file", path), slog.Int64("offset", jr.off), slog.Int64("droppedBytes", fi.Size()-jr.off),
			slog.String("reason", torn.reason), slog.Uint64("lastGoodRecord", last))
		if err := f.Truncate(jr.off); err != nil {
			return fail(fmt.Errorf("cutting the journal at offset %d: %w", jr.off, err))
		}
		if err := datasync(f); err != nil {
			return fail(fmt.Errorf("syncing the journal after cutting it: %w", err))
		}
	}
	return jr.off, last, records, nil
}

// describeSeqs says which record each snapshot includes, or that it is
// missing.
func describeSeqs(seqs []uint64, have []bool) string {
	var b strings.Builder
	for i, p := range parts {
		if i > 0 {
			b.WriteString(", ")
		}
		if !have[i] {
			fmt.Fprintf(&b, "%s is missing", p.name)
			continue
		}
		fmt.Fprintf(&b, "%s is at record %d", p.name, seqs[i])
	}
	return b.String()
}

// applyLoaded applies a change read from disk to mem, normalised as Apply
// normalises changes, so that a reopened store holds what a live one did.
func applyLoaded(mem *store.Memory, c *store.Change) error {
	nc, err := normalize(c)
	if err != nil {
		return err
	}
	return mem.Apply(context.Background(), nc)
}
