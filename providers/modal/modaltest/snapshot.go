package modaltest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/boxfs/boxfs/providers/modal/internal/pb"
)

// TaskSnapshotFilesystem snapshots a running task's filesystem into an
// image: the sandbox's own directory (its HOME, and its working directory
// when its definition names none) is copied, with its processes stopped
// meanwhile, and the image, built, answers ImageFromId and starts new
// sandboxes with the copy. A retry with the same snapshot_id gets the same
// image.
func (r *routerService) TaskSnapshotFilesystem(_ context.Context, req *pb.TaskSnapshotFilesystemRequest) (*pb.TaskSnapshotFilesystemResponse, error) {
	sb, err := r.running(req.GetTaskId())
	if err != nil {
		return nil, err
	}
	if req.GetSnapshotId() == "" || req.GetTtlSeconds() < 0 {
		return nil, status.Error(codes.InvalidArgument, "a snapshot needs a snapshot_id and a ttl that is not negative")
	}
	s := r.s
	s.mu.Lock()
	if id := s.snapshots[req.GetSnapshotId()]; id != "" {
		s.mu.Unlock()
		return &pb.TaskSnapshotFilesystemResponse{ImageId: id}, nil
	}
	s.mu.Unlock()
	dir, err := os.MkdirTemp("", "modaltest-image-")
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	signalTagged(sb.id, syscall.SIGSTOP)
	err = copyDir(sb.dir, dir)
	signalTagged(sb.id, syscall.SIGCONT)
	if err != nil {
		os.RemoveAll(dir)
		return nil, status.Error(codes.Internal, err.Error())
	}
	img := &image{id: newID("im-"), result: &pb.GenericResult{Status: pb.GenericResult_GENERIC_STATUS_SUCCESS}, dir: dir}
	s.mu.Lock()
	s.images[img.id] = img
	s.snapshots[req.GetSnapshotId()] = img.id
	s.mu.Unlock()
	return &pb.TaskSnapshotFilesystemResponse{ImageId: img.id}, nil
}

// copyDir copies the tree of src into dst with cp -a, modes and links
// kept.
func copyDir(src, dst string) error {
	if out, err := exec.Command("cp", "-a", src+"/.", dst).CombinedOutput(); err != nil {
		return fmt.Errorf("cp: %v: %s", err, bytes.TrimSpace(out))
	}
	return nil
}
