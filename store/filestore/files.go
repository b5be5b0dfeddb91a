package filestore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// File names in the store's directory.
const (
	lockName      = "LOCK"
	orgName       = "org.json"
	pendingName   = "pending.json"
	statesName    = "state.json"
	historiesName = "histories.json"
	journalName   = "journal.log"
	artifactsName = "artifacts"
	tmpSuffix     = ".tmp"
)

const (
	fileMode = 0o600
	dirMode  = 0o700
)

// writeFileAtomic replaces dir/name with data: a temporary file beside it,
// written, synced and renamed over it. The caller syncs dir to make the
// rename durable.
func writeFileAtomic(dir, name string, data []byte) (err error) {
	f, err := os.CreateTemp(dir, name+".*"+tmpSuffix)
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err := f.Chmod(fileMode); err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, name))
}

// syncDir makes the entries of dir (creations, renames, removals) durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("syncing directory %s: %w", dir, err)
	}
	return nil
}

// removeTemps removes what writes in progress left in dir when the process
// stopped: files named like the temporary files this package makes, with
// one of the given prefixes if any are given.
// It returns how many it removed.
func removeTemps(dir string, prefixes ...string) (int, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	removed := 0
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, tmpSuffix) || !e.Type().IsRegular() {
			continue
		}
		ours := len(prefixes) == 0
		for _, p := range prefixes {
			ours = ours || strings.HasPrefix(name, p+".")
		}
		if ours {
			if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return removed, err
			}
			removed++
		}
	}
	return removed, nil
}

// Every JSON file the store writes (the snapshots and the artifacts'
// sidecars) begins with its checksum, as the first field of its object:
// the CRC-32C (Castagnoli) of every byte after the comma that ends the
// field, to the end of the file, in eight lower-case hex digits. The field
// is written in one of two exact forms, as the file is indented or not;
// the file stays JSON, and the field is ignored where it is decoded.
const (
	sumIndented = "{\n  \"crc32c\": \""
	sumCompact  = "{\"crc32c\":\""
	sumDigits   = 8
)

// seal returns body, a JSON object with at least one field as
// encodeSnapshot makes it, with its checksum field put first.
func seal(body []byte, indent bool) []byte {
	rest := body[1:] // after the "{"
	prefix := sumCompact
	if indent {
		prefix = sumIndented
	}
	out := make([]byte, 0, len(prefix)+sumDigits+2+len(rest))
	out = append(out, prefix...)
	out = fmt.Appendf(out, "%08x", crc32.Checksum(rest, castagnoli))
	out = append(out, '"', ',')
	return append(out, rest...)
}

// checkSeal checks the checksum field a file the store wrote begins with.
// It returns false if data does not begin like such a file, and an error
// wrapping ErrCorrupt, naming the file path, if it does and its checksum
// field is damaged or does not match the rest.
func checkSeal(path string, data []byte) (bool, error) {
	var n int
	switch {
	case bytes.HasPrefix(data, []byte(sumIndented)):
		n = len(sumIndented)
	case bytes.HasPrefix(data, []byte(sumCompact)):
		n = len(sumCompact)
	default:
		return false, nil
	}
	if len(data) < n+sumDigits+2 || data[n+sumDigits] != '"' || data[n+sumDigits+1] != ',' {
		return true, fmt.Errorf("%w %s: its checksum field is damaged", ErrCorrupt, path)
	}
	got, rest := data[n:n+sumDigits], data[n+sumDigits+2:]
	// The digits must be exactly those the store writes: any change to
	// the file, even one that parses as the same number, is damage.
	if want := fmt.Appendf(nil, "%08x", crc32.Checksum(rest, castagnoli)); !bytes.Equal(got, want) {
		return true, fmt.Errorf("%w %s: its checksum says %q, but its content's is %q", ErrCorrupt, path, got, want)
	}
	return true, nil
}

// decodeFile checks the checksum a JSON file of the store's begins with
// and decodes the file, data, into v; version returns the version v holds
// once decoded. A file without a checksum is read only if it has no
// version either: one written by hand, such as seed 001's example
// org.json. Every error names the file, path.
func decodeFile(path string, data []byte, v any, version func() int) error {
	sealed, err := checkSeal(path, data)
	if err != nil {
		return err
	}
	if t := bytes.TrimLeft(data, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return fmt.Errorf("%w %s: it does not hold a JSON object (%d bytes)", ErrCorrupt, path, len(data))
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%w %s: it does not parse: %w", ErrCorrupt, path, err)
	}
	switch n := version(); {
	case n != 0 && n != formatVersion:
		return fmt.Errorf("filestore: %s has version %d; this package reads version %d", path, n, formatVersion)
	case n != 0 && !sealed:
		return fmt.Errorf("%w %s: it has no checksum, which every file the store writes begins with (only a file without a \"version\", written by hand, is read without one)", ErrCorrupt, path)
	}
	return nil
}

// readSnapshot decodes the snapshot at path into v. It returns false if
// the file does not exist, and the file's size. Every other failure is an
// error that names the file: a snapshot that does not parse is never taken
// for an empty one.
func readSnapshot(path string, v snapshot) (bool, int64, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, 0, nil
	}
	if err != nil {
		return false, 0, fmt.Errorf("filestore: reading %s: %w", path, err)
	}
	if err := decodeFile(path, data, v, func() int { return v.header().Version }); err != nil {
		return false, 0, err
	}
	if h := v.header(); h.JournalSeq > maxLSN {
		return false, 0, fmt.Errorf("filestore: %s: journalSeq %d is over %d", path, h.JournalSeq, uint64(maxLSN))
	}
	return true, int64(len(data)), nil
}
