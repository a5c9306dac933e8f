package archiltest

import (
	"crypto/md5"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
)

// S3's bounds on a multipart upload, which the vendor's client keeps to.
const (
	minPartSize = 5 << 20 // every part but the last
	maxPartNum  = 10000
)

// upload is one multipart upload in progress.
type upload struct {
	disk, key string
	parts     map[int][]byte
}

// Upload is a multipart upload the fake completed: its parts' sizes in
// part-number order.
type Upload struct {
	Disk, Key string
	PartSizes []int64
}

// Uploads returns the multipart uploads completed so far.
func (s *Server) Uploads() []Upload {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Upload(nil), s.completed...)
}

func xmlAnswer(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/xml")
	io.WriteString(w, xml.Header)
	xml.NewEncoder(w).Encode(v)
}

// multipart serves the multipart calls on one key: CreateMultipartUpload
// (POST ?uploads), UploadPart (PUT ?uploadId&partNumber),
// CompleteMultipartUpload (POST ?uploadId) and AbortMultipartUpload
// (DELETE ?uploadId). It reports whether r was one of them.
func (s *Server) multipart(w http.ResponseWriter, r *http.Request, root *os.Root, d *disk, key string) bool {
	q := r.URL.Query()
	_, initiate := q["uploads"]
	id := q.Get("uploadId")
	switch {
	case r.Method == http.MethodPost && initiate:
		if s.opts.SharedMode && s.heldByOther(key) {
			s3Error(w, http.StatusConflict, "OperationAborted", "Another client owns this path", key)
			return true
		}
		id := randHex(16)
		s.mu.Lock()
		s.uploads[id] = &upload{disk: d.ID, key: key, parts: map[int][]byte{}}
		s.mu.Unlock()
		xmlAnswer(w, struct {
			XMLName  xml.Name `xml:"http://s3.amazonaws.com/doc/2006-03-01/ InitiateMultipartUploadResult"`
			Bucket   string   `xml:"Bucket"`
			Key      string   `xml:"Key"`
			UploadID string   `xml:"UploadId"`
		}{Bucket: d.ID, Key: key, UploadID: id})
		return true
	case id == "":
		return false
	}
	s.mu.Lock()
	up := s.uploads[id]
	s.mu.Unlock()
	if up == nil || up.disk != d.ID || up.key != key {
		s3Error(w, http.StatusNotFound, "NoSuchUpload", "The specified upload does not exist.", key)
		return true
	}
	switch r.Method {
	case http.MethodPut:
		n, err := strconv.Atoi(q.Get("partNumber"))
		if err != nil || n < 1 || n > maxPartNum {
			s3Error(w, http.StatusBadRequest, "InvalidArgument", "Part number must be an integer between 1 and 10000, inclusive", key)
			return true
		}
		if r.ContentLength < 0 {
			s3Error(w, http.StatusLengthRequired, "MissingContentLength", "You must provide the Content-Length HTTP header.", key)
			return true
		}
		data, err := io.ReadAll(r.Body)
		if err != nil {
			return true
		}
		s.mu.Lock()
		up.parts[n] = data
		s.mu.Unlock()
		w.Header().Set("ETag", etag(data))
		w.WriteHeader(http.StatusOK)
	case http.MethodDelete:
		s.mu.Lock()
		delete(s.uploads, id)
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	case http.MethodPost:
		s.complete(w, r, root, id, up)
	default:
		s3Error(w, http.StatusMethodNotAllowed, "MethodNotAllowed", "The specified method is not allowed against this resource.", key)
	}
	return true
}

// complete assembles the parts a CompleteMultipartUpload lists, checked as
// S3 checks them: in ascending order, each uploaded with that ETag, each
// but the last at least 5 MiB.
func (s *Server) complete(w http.ResponseWriter, r *http.Request, root *os.Root, id string, up *upload) {
	if r.ContentLength < 0 {
		s3Error(w, http.StatusLengthRequired, "MissingContentLength", "You must provide the Content-Length HTTP header.", up.key)
		return
	}
	var doc struct {
		XMLName xml.Name `xml:"CompleteMultipartUpload"`
		Parts   []struct {
			PartNumber int    `xml:"PartNumber"`
			ETag       string `xml:"ETag"`
		} `xml:"Part"`
	}
	if err := xml.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&doc); err != nil || len(doc.Parts) == 0 {
		s3Error(w, http.StatusBadRequest, "MalformedXML", "The XML you provided was not well-formed or did not validate against our published schema.", up.key)
		return
	}
	if s.opts.SharedMode && s.heldByOther(up.key) {
		s3Error(w, http.StatusConflict, "OperationAborted", "Another client owns this path", up.key)
		return
	}
	s.mu.Lock()
	var data []byte
	var sizes []int64
	var sums []byte
	bad := ""
	for i := 1; i < len(doc.Parts); i++ {
		if doc.Parts[i].PartNumber <= doc.Parts[i-1].PartNumber {
			bad = "InvalidPartOrder"
		}
	}
	for i, p := range doc.Parts {
		if bad != "" {
			break
		}
		b, ok := up.parts[p.PartNumber]
		switch {
		case !ok || etag(b) != p.ETag:
			bad = "InvalidPart"
		case i < len(doc.Parts)-1 && len(b) < minPartSize:
			bad = "EntityTooSmall"
		}
		if bad != "" {
			break
		}
		data = append(data, b...)
		sizes = append(sizes, int64(len(b)))
		sum := md5.Sum(b)
		sums = append(sums, sum[:]...)
	}
	s.mu.Unlock()
	if bad != "" {
		s3Error(w, http.StatusBadRequest, bad, "The list of parts was not valid: "+bad, up.key)
		return
	}
	s.noteObjectWrite(up.disk, up.key)
	ok := s.place(w, root, up.key, data)
	s.noteObjectWrite(up.disk, up.key)
	if !ok {
		return
	}
	sum := md5.Sum(sums)
	s.mu.Lock()
	delete(s.uploads, id)
	s.completed = append(s.completed, Upload{Disk: up.disk, Key: up.key, PartSizes: sizes})
	s.mu.Unlock()
	xmlAnswer(w, struct {
		XMLName  xml.Name `xml:"http://s3.amazonaws.com/doc/2006-03-01/ CompleteMultipartUploadResult"`
		Location string   `xml:"Location"`
		Bucket   string   `xml:"Bucket"`
		Key      string   `xml:"Key"`
		ETag     string   `xml:"ETag"`
	}{Location: "/" + up.disk + "/" + up.key, Bucket: up.disk, Key: up.key, ETag: fmt.Sprintf(`"%s-%d"`, hex.EncodeToString(sum[:]), len(sizes))})
}
