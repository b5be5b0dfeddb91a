package filestore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"agentsociety/store"
)

// maxArtifactID is the longest artifact id the store accepts, in bytes.
const maxArtifactID = 128

// checkArtifactID reports why id cannot name an artifact, if it cannot.
// File names never come from ids (see artifactName), so this is defence in
// depth: an id that looks like a path is refused before it reaches any
// file system call.
func checkArtifactID(id string) error {
	var why string
	switch {
	case id == "":
		why = "it is empty"
	case len(id) > maxArtifactID:
		why = fmt.Sprintf("it is %d bytes long, over %d", len(id), maxArtifactID)
	case !utf8.ValidString(id):
		why = "it is not valid UTF-8"
	case strings.ContainsAny(id, `/\`):
		why = "it contains a path separator"
	case strings.Contains(id, ".."):
		why = `it contains ".."`
	case filepath.IsAbs(id) || filepath.VolumeName(id) != "":
		why = "it is an absolute path"
	case strings.ContainsFunc(id, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		why = "it contains NUL or another control character"
	default:
		return nil
	}
	return fmt.Errorf("%w %q: %s", ErrInvalidArtifactID, id, why)
}

// artifactName returns the base name of an artifact's files, chosen by the
// store: the hex SHA-256 of its id, safe on any file system (no separators,
// no case folding collisions, fixed length).
func artifactName(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:])
}

// PutArtifact stores a's metadata and data; an id that exists fails with
// an error wrapping store.ErrExists, and an id the store refuses (see the
// package documentation) with one wrapping ErrInvalidArtifactID. The content
// is written to a temporary file, synced and renamed, and so is the sidecar
// after it: once PutArtifact returns, the artifact is on stable storage.
func (s *Store) PutArtifact(ctx context.Context, a store.Artifact, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.closeMu.RUnlock()
	if err := checkArtifactID(a.ID); err != nil {
		return err
	}
	if err := checkStrings("artifact", a.ID, a.Name, a.MediaType, a.CreatedBy); err != nil {
		return err
	}
	meta, err := encodeSnapshot(artifactJSON{
		Version:   formatVersion,
		ID:        a.ID,
		Name:      a.Name,
		MediaType: a.MediaType,
		CreatedBy: a.CreatedBy,
		Size:      a.Size,
		CreatedAt: wireTime(a.CreatedAt),
		Bytes:     int64(len(data)),
		CRC32C:    crc32.Checksum(data, castagnoli),
	}, true)
	if err != nil {
		return fmt.Errorf("filestore: artifact %q: encoding its metadata: %w", a.ID, err)
	}

	name := artifactName(a.ID)
	mu := &s.artifactMu[name[0]%byte(len(s.artifactMu))]
	mu.Lock()
	defer mu.Unlock()
	dir := filepath.Join(s.dir, artifactsName)
	switch _, err := os.Lstat(filepath.Join(dir, name+".json")); {
	case err == nil:
		return fmt.Errorf("filestore: %w: artifact %q", store.ErrExists, a.ID)
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("filestore: artifact %q: %w", a.ID, err)
	}
	// The content must be durable under its name before the sidecar that
	// makes it visible: a crash in between leaves content nobody reads,
	// which the next put of the id replaces.
	if err := writeFileAtomic(dir, name, data); err != nil {
		return fmt.Errorf("filestore: artifact %q: writing its content: %w", a.ID, err)
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("filestore: artifact %q: %w", a.ID, err)
	}
	if err := writeFileAtomic(dir, name+".json", meta); err != nil {
		return fmt.Errorf("filestore: artifact %q: writing its metadata: %w", a.ID, err)
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("filestore: artifact %q: %w", a.ID, err)
	}
	return nil
}

// GetArtifact returns the artifact's metadata and content. An unknown id,
// or one the store refuses, fails with an error wrapping store.ErrNotFound;
// a damaged sidecar, or content that does not match its sidecar's length
// and checksum, is reported with an error wrapping ErrCorrupt, not
// returned.
func (s *Store) GetArtifact(ctx context.Context, id string) (store.Artifact, []byte, error) {
	if err := ctx.Err(); err != nil {
		return store.Artifact{}, nil, err
	}
	if err := s.enter(); err != nil {
		return store.Artifact{}, nil, err
	}
	defer s.closeMu.RUnlock()
	if err := checkArtifactID(id); err != nil {
		return store.Artifact{}, nil, fmt.Errorf("%w (%w)", err, store.ErrNotFound)
	}
	name := artifactName(id)
	dir := filepath.Join(s.dir, artifactsName)
	metaPath := filepath.Join(dir, name+".json")
	raw, err := os.ReadFile(metaPath)
	if errors.Is(err, fs.ErrNotExist) {
		return store.Artifact{}, nil, fmt.Errorf("filestore: %w: artifact %q", store.ErrNotFound, id)
	}
	if err != nil {
		return store.Artifact{}, nil, fmt.Errorf("filestore: artifact %q: %w", id, err)
	}
	var meta artifactJSON
	if err := decodeFile(metaPath, raw, &meta, func() int { return meta.Version }); err != nil {
		return store.Artifact{}, nil, fmt.Errorf("%w (the metadata of artifact %q)", err, id)
	}
	if meta.ID != id {
		return store.Artifact{}, nil, fmt.Errorf("%w %s: the metadata of artifact %q names artifact %q", ErrCorrupt, metaPath, id, meta.ID)
	}
	contentPath := filepath.Join(dir, name)
	data, err := os.ReadFile(contentPath)
	if errors.Is(err, fs.ErrNotExist) {
		// The content is durable before the sidecar is written: a sidecar
		// without it is damage, not an artifact in progress.
		return store.Artifact{}, nil, fmt.Errorf("%w %s: the content of artifact %q is missing, though its metadata (%s) says it has %d bytes",
			ErrCorrupt, contentPath, id, metaPath, meta.Bytes)
	}
	if err != nil {
		return store.Artifact{}, nil, fmt.Errorf("filestore: artifact %q: reading its content: %w", id, err)
	}
	if n, sum := int64(len(data)), crc32.Checksum(data, castagnoli); n != meta.Bytes || sum != meta.CRC32C {
		return store.Artifact{}, nil, fmt.Errorf("%w %s: the content of artifact %q does not match its metadata: %d bytes with checksum %08x, want %d bytes with checksum %08x",
			ErrCorrupt, contentPath, id, n, sum, meta.Bytes, meta.CRC32C)
	}
	if len(data) == 0 {
		data = nil
	}
	a := store.Artifact{
		ID:        meta.ID,
		Name:      meta.Name,
		MediaType: meta.MediaType,
		CreatedBy: meta.CreatedBy,
		Size:      meta.Size,
		CreatedAt: meta.CreatedAt,
	}
	return a, data, nil
}
