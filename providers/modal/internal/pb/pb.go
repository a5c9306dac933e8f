// Package pb holds the Go code generated from boxfs's subset of Modal's
// protocol buffers (modal_proto/*.proto): the control plane
// (modal.client.ModalClient) and the per-task command router
// (modal.task_command_router.TaskCommandRouter). The generated files are
// committed, so building boxfs needs no protoc.
package pb

//go:generate protoc -I . --go_out=. --go_opt=module=github.com/boxfs/boxfs/providers/modal/internal/pb --go-grpc_out=. --go-grpc_opt=module=github.com/boxfs/boxfs/providers/modal/internal/pb modal_proto/api.proto modal_proto/task_command_router.proto
