package filestore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
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
	if t := bytes.TrimLeft(data, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return false, 0, fmt.Errorf("filestore: %s does not hold a JSON object (%d bytes)", path, len(data))
	}
	if err := json.Unmarshal(data, v); err != nil {
		return false, 0, fmt.Errorf("filestore: %s does not parse: %w", path, err)
	}
	h := v.header()
	if h.Version != 0 && h.Version != formatVersion {
		return false, 0, fmt.Errorf("filestore: %s has version %d; this package reads version %d", path, h.Version, formatVersion)
	}
	if h.JournalSeq > maxLSN {
		return false, 0, fmt.Errorf("filestore: %s: journalSeq %d is over %d", path, h.JournalSeq, uint64(maxLSN))
	}
	return true, int64(len(data)), nil
}
