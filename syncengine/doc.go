// Package syncengine moves a box's workspace between the box and the host
// in bulk: listings and marks (what a tree held at a moment), seed (a host
// directory into a box, one tar) and incremental pull (what changed in a
// box since a mark back into a host directory, one listing and at most one
// tar).
//
// Every tar from a box goes through syncengine/safetar, so nothing a box
// sends can write outside the host directory. The write-back cache the
// filesystem reads and writes through is syncengine/cache.
//
// # Marks
//
// A Mark is one box-side listing of a tree (kind, size, mode, mtime to the
// nanosecond, per path), plus the SHA-256 of the files a pull or seed
// moved, plus the host-side stat of the files a pull wrote. Diff compares
// two marks by kind, size, mode and mtime only: the box's clock is never
// compared with the host's. Marks serialise to JSON (Save, LoadMark).
//
// # Patterns
//
// Exclude and ReadOnly take patterns as path.Match does, against paths
// relative to the tree's root. A pattern with no slash matches any one
// segment ("*.o", "node_modules"); a pattern with a slash matches from the
// root ("build/*", "/vendor"). A pattern that matches a directory matches
// everything under it.
package syncengine
