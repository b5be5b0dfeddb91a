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

// corruptError is a record Open cannot read: the journal is cut before it.
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
	if got := crc32.Checksum(payload, castagnoli); got != sum {
		return rec, off, &corruptError{fmt.Sprintf("a bad checksum (%08x, want %08x)", got, sum)}
	}
	if err := json.Unmarshal(payload, &rec); err != nil {
		return rec, off, &corruptError{fmt.Sprintf("a payload that is not a record: %v", err)}
	}
	if rec.LSN == 0 || rec.LSN > maxLSN {
		return rec, off, &corruptError{fmt.Sprintf("a payload without a valid sequence number (%d)", rec.LSN)}
	}
	jr.off += frameHeader + int64(length)
	return rec, off, nil
}

// replay applies the journal f to mem, skipping for each part of the state
// the records its snapshot includes: seqs[i] for parts[i]. A torn or
// corrupt tail is cut off f and logged.
//
// It returns the journal's size after any cut, the last sequence number it
// holds (0 if none), and how many records it holds past the snapshots.
func replay(f *os.File, path string, mem *store.Memory, seqs []uint64, log *slog.Logger) (size int64, last uint64, records int64, err error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, 0, 0, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, 0, 0, err
	}
	jr := &journalReader{r: bufio.NewReaderSize(f, 1<<20), size: fi.Size()}
	base, top := slices.Min(seqs), slices.Max(seqs)
	ctx := context.Background()
	for {
		rec, off, err := jr.next()
		if err == io.EOF {
			break
		}
		var ce *corruptError
		if errors.As(err, &ce) {
			dropped := fi.Size() - off
			log.LogAttrs(ctx, slog.LevelWarn, "filestore: dropping the journal's torn or corrupt tail",
				slog.String("file", path), slog.Int64("offset", off), slog.Int64("droppedBytes", dropped),
				slog.String("reason", ce.reason), slog.Uint64("lastGoodRecord", last))
			if err := f.Truncate(off); err != nil {
				return 0, 0, 0, fmt.Errorf("cutting the journal at offset %d: %w", off, err)
			}
			if err := datasync(f); err != nil {
				return 0, 0, 0, fmt.Errorf("syncing the journal after cutting it: %w", err)
			}
			jr.off = off
			break
		}
		if err != nil {
			return 0, 0, 0, err
		}
		if rec.LSN <= base {
			// Already in every snapshot: the journal was not restarted
			// after they were written.
			last = rec.LSN
			continue
		}
		if want := max(last, base) + 1; rec.LSN != want {
			return 0, 0, 0, fmt.Errorf("the record at offset %d is number %d where number %d should follow (%s): records are missing (is a snapshot missing or older than the journal?)", off, rec.LSN, want, describeSeqs(seqs))
		}
		var c store.Change
		for i, p := range parts {
			if rec.LSN > seqs[i] {
				p.of(&rec.changeJSON, &c)
			}
		}
		if !c.Empty() {
			if err := applyLoaded(mem, &c); err != nil {
				return 0, 0, 0, fmt.Errorf("record %d at offset %d: %w", rec.LSN, off, err)
			}
		}
		last = rec.LSN
		records++
	}
	// A compaction syncs the journal through the records of the snapshots
	// before it writes them, so the journal holds every record an older
	// snapshot lacks; if it does not, something else removed them.
	if base < top && last < top {
		return 0, 0, 0, fmt.Errorf("the journal ends at record %d, but %s: records are missing (is a snapshot missing or older than the journal?)", last, describeSeqs(seqs))
	}
	return jr.off, last, records, nil
}

// describeSeqs says which record each snapshot includes.
func describeSeqs(seqs []uint64) string {
	var b strings.Builder
	for i, p := range parts {
		if i > 0 {
			b.WriteString(", ")
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
