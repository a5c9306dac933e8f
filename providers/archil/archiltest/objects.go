package archiltest

import (
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// s3Error answers an S3 error document.
func s3Error(w http.ResponseWriter, status int, code, msg, key string) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	type errorDoc struct {
		XMLName   xml.Name `xml:"Error"`
		Code      string   `xml:"Code"`
		Message   string   `xml:"Message"`
		Key       string   `xml:"Key,omitempty"`
		RequestID string   `xml:"RequestId"`
	}
	io.WriteString(w, xml.Header)
	xml.NewEncoder(w).Encode(errorDoc{Code: code, Message: msg, Key: key, RequestID: randHex(8)})
}

func (s *Server) objects(w http.ResponseWriter, r *http.Request) {
	id, key, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	s.mu.Lock()
	d := s.disks[id]
	s.mu.Unlock()
	if d == nil {
		s3Error(w, http.StatusNotFound, "NoSuchBucket", "The specified bucket does not exist", "")
		return
	}
	if key == "" {
		if r.Method == http.MethodGet && r.URL.Query().Get("list-type") == "2" {
			s.list(w, r, d)
			return
		}
		s3Error(w, http.StatusNotImplemented, "NotImplemented", "A header or query you provided implies functionality that is not implemented", "")
		return
	}
	if !filepath.IsLocal(key) || path.Clean(key) != key {
		s3Error(w, http.StatusBadRequest, "InvalidArgument", "The key is not a path on the disk", key)
		return
	}
	root, err := os.OpenRoot(d.Dir)
	if err != nil {
		s3Error(w, http.StatusInternalServerError, "InternalError", "We encountered an internal error. Please try again.", key)
		return
	}
	defer root.Close()
	if s.multipart(w, r, root, d, key) {
		return
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		s.getObject(w, r, root, key)
	case http.MethodPut:
		if r.ContentLength < 0 {
			// S3 takes no chunked upload without a declared length.
			s3Error(w, http.StatusLengthRequired, "MissingContentLength", "You must provide the Content-Length HTTP header.", key)
			return
		}
		if s.opts.SharedMode && s.heldByOther(key) {
			s3Error(w, http.StatusConflict, "OperationAborted", "Another client owns this path", key)
			return
		}
		// Noted before and after: a container that starts meanwhile
		// sees one of the two.
		s.noteObjectWrite(d.ID, key)
		s.putObject(w, r, root, key)
		s.noteObjectWrite(d.ID, key)
	case http.MethodDelete:
		if s.opts.SharedMode && s.heldByOther(key) {
			s3Error(w, http.StatusConflict, "OperationAborted", "Another client owns this path", key)
			return
		}
		s.noteObjectWrite(d.ID, key)
		if fi, err := root.Lstat(key); err == nil && !fi.IsDir() {
			root.Remove(key)
		}
		s.noteObjectWrite(d.ID, key)
		w.WriteHeader(http.StatusNoContent)
	default:
		s3Error(w, http.StatusMethodNotAllowed, "MethodNotAllowed", "The specified method is not allowed against this resource.", key)
	}
}

func etag(b []byte) string {
	sum := md5.Sum(b)
	return `"` + hex.EncodeToString(sum[:]) + `"`
}

func (s *Server) getObject(w http.ResponseWriter, r *http.Request, root *os.Root, key string) {
	f, err := root.Open(key)
	var fi os.FileInfo
	if err == nil {
		defer f.Close()
		fi, err = f.Stat()
	}
	if err != nil || !fi.Mode().IsRegular() {
		if r.Method == http.MethodHead {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		s3Error(w, http.StatusNotFound, "NoSuchKey", "The specified key does not exist.", key)
		return
	}
	data, err := io.ReadAll(f)
	if err != nil {
		s3Error(w, http.StatusInternalServerError, "InternalError", "We encountered an internal error. Please try again.", key)
		return
	}
	h := w.Header()
	h.Set("ETag", etag(data))
	h.Set("Last-Modified", fi.ModTime().UTC().Format(http.TimeFormat))
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Accept-Ranges", "bytes")
	status := http.StatusOK
	if rg := r.Header.Get("Range"); rg != "" && r.Method == http.MethodGet {
		from, to, ok := parseRange(rg, int64(len(data)))
		if !ok {
			h.Set("Content-Range", fmt.Sprintf("bytes */%d", len(data)))
			s3Error(w, http.StatusRequestedRangeNotSatisfiable, "InvalidRange", "The requested range is not satisfiable", key)
			return
		}
		h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", from, to, len(data)))
		data = data[from : to+1]
		status = http.StatusPartialContent
	}
	h.Set("Content-Length", strconv.Itoa(len(data)))
	w.WriteHeader(status)
	if r.Method == http.MethodGet {
		w.Write(data)
	}
}

// parseRange reads "bytes=A-B" or "bytes=A-" for an object of size n.
func parseRange(v string, n int64) (int64, int64, bool) {
	spec, ok := strings.CutPrefix(v, "bytes=")
	if !ok || strings.Contains(spec, ",") {
		return 0, 0, false
	}
	a, b, _ := strings.Cut(spec, "-")
	from, err := strconv.ParseInt(a, 10, 64)
	if err != nil || from < 0 || from >= n {
		return 0, 0, false
	}
	to := n - 1
	if b != "" {
		t, err := strconv.ParseInt(b, 10, 64)
		if err != nil || t < from {
			return 0, 0, false
		}
		to = min(t, n-1)
	}
	return from, to, true
}

func (s *Server) putObject(w http.ResponseWriter, r *http.Request, root *os.Root, key string) {
	data, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	if s.place(w, root, key, data) {
		w.Header().Set("ETag", etag(data))
		w.WriteHeader(http.StatusOK)
	}
}

// place writes an object whole (a temporary name, then rename), making
// missing parent directories. On failure it answers the error and
// reports false.
func (s *Server) place(w http.ResponseWriter, root *os.Root, key string, data []byte) bool {
	if dir := path.Dir(key); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			s3Error(w, http.StatusConflict, "OperationAborted", "A parent of the key is not a directory", key)
			return false
		}
	}
	if fi, err := root.Lstat(key); err == nil && fi.IsDir() {
		s3Error(w, http.StatusConflict, "OperationAborted", "The key names a directory", key)
		return false
	}
	tmp := path.Join(path.Dir(key), ".archiltest-put-"+randHex(6))
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err == nil {
		_, err = f.Write(data)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err == nil {
		err = root.Rename(tmp, key)
	}
	if err != nil {
		root.Remove(tmp)
		s3Error(w, http.StatusInternalServerError, "InternalError", "We encountered an internal error. Please try again.", key)
		return false
	}
	return true
}

// listEntry is one key or common prefix of a listing.
type listEntry struct {
	key    string
	prefix bool
	size   int64
	mtime  time.Time
	etag   string
}

type listResult struct {
	XMLName               xml.Name       `xml:"http://s3.amazonaws.com/doc/2006-03-01/ ListBucketResult"`
	Name                  string         `xml:"Name"`
	Prefix                string         `xml:"Prefix"`
	Delimiter             string         `xml:"Delimiter,omitempty"`
	MaxKeys               int            `xml:"MaxKeys"`
	KeyCount              int            `xml:"KeyCount"`
	IsTruncated           bool           `xml:"IsTruncated"`
	ContinuationToken     string         `xml:"ContinuationToken,omitempty"`
	NextContinuationToken string         `xml:"NextContinuationToken,omitempty"`
	StartAfter            string         `xml:"StartAfter,omitempty"`
	Contents              []listContent  `xml:"Contents"`
	CommonPrefixes        []commonPrefix `xml:"CommonPrefixes"`
}

type listContent struct {
	Key          string `xml:"Key"`
	LastModified string `xml:"LastModified"`
	ETag         string `xml:"ETag"`
	Size         int64  `xml:"Size"`
	StorageClass string `xml:"StorageClass"`
}

type commonPrefix struct {
	Prefix string `xml:"Prefix"`
}

// list answers ListObjectsV2 over the disk's directory.
func (s *Server) list(w http.ResponseWriter, r *http.Request, d *disk) {
	q := r.URL.Query()
	prefix, delim := q.Get("prefix"), q.Get("delimiter")
	if delim != "" && delim != "/" {
		s3Error(w, http.StatusNotImplemented, "NotImplemented", "Only / is taken as a delimiter", "")
		return
	}
	after := q.Get("start-after")
	token := q.Get("continuation-token")
	if token != "" {
		b, err := base64.RawURLEncoding.DecodeString(token)
		if err != nil {
			s3Error(w, http.StatusBadRequest, "InvalidArgument", "The continuation token provided is incorrect", "")
			return
		}
		after = string(b)
	}
	max := s.opts.PageSize
	if mk := q.Get("max-keys"); mk != "" {
		if n, err := strconv.Atoi(mk); err == nil && n >= 0 && n < max {
			max = n
		}
	}
	entries := walkKeys(d.Dir, prefix, delim)
	res := listResult{Name: d.ID, Prefix: prefix, Delimiter: delim, MaxKeys: max, ContinuationToken: token, StartAfter: q.Get("start-after")}
	for _, e := range entries {
		if e.key <= after {
			continue
		}
		if res.KeyCount == max {
			res.IsTruncated = true
			last := res.Contents
			lastKey := ""
			if len(last) > 0 {
				lastKey = last[len(last)-1].Key
			}
			if n := len(res.CommonPrefixes); n > 0 && res.CommonPrefixes[n-1].Prefix > lastKey {
				lastKey = res.CommonPrefixes[n-1].Prefix
			}
			res.NextContinuationToken = base64.RawURLEncoding.EncodeToString([]byte(lastKey))
			break
		}
		res.KeyCount++
		if e.prefix {
			res.CommonPrefixes = append(res.CommonPrefixes, commonPrefix{Prefix: e.key})
		} else {
			res.Contents = append(res.Contents, listContent{Key: e.key, LastModified: e.mtime.UTC().Format("2006-01-02T15:04:05.000Z"), ETag: e.etag, Size: e.size, StorageClass: "STANDARD"})
		}
	}
	w.Header().Set("Content-Type", "application/xml")
	io.WriteString(w, xml.Header)
	xml.NewEncoder(w).Encode(res)
}

// walkKeys lists the regular files under dir whose keys start with prefix,
// in key order; with delimiter "/", what lies below the next "/" after the
// prefix is one common prefix (directories, empty ones too, included).
func walkKeys(dir, prefix, delim string) []listEntry {
	seen := map[string]bool{}
	var out []listEntry
	filepath.WalkDir(dir, func(p string, de fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return nil
		}
		rel := filepath.ToSlash(strings.TrimPrefix(p, dir+string(filepath.Separator)))
		key := rel
		if de.IsDir() {
			key += "/"
		}
		if !strings.HasPrefix(key, prefix) && !strings.HasPrefix(prefix, key) {
			if de.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasPrefix(key, prefix) {
			return nil // a directory above the prefix: walk on into it
		}
		if delim != "" {
			if i := strings.Index(key[len(prefix):], delim); i >= 0 {
				cp := key[:len(prefix)+i+1]
				if !seen[cp] {
					seen[cp] = true
					out = append(out, listEntry{key: cp, prefix: true})
				}
				if de.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
		}
		if !de.Type().IsRegular() {
			return nil
		}
		fi, err := de.Info()
		if err != nil {
			return nil
		}
		b, _ := os.ReadFile(p)
		out = append(out, listEntry{key: key, size: fi.Size(), mtime: fi.ModTime(), etag: etag(b)})
		return nil
	})
	slices.SortFunc(out, func(a, b listEntry) int { return strings.Compare(a.key, b.key) })
	return out
}
