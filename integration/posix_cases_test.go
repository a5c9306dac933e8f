package integration

import "strings"

// The users of the comparison, as pjdfstest names them: u1 is in groups
// g1 and g2, u2 in g2 alone; no one but root is in g3.
const (
	u1, u2     = "65534", "65533"
	g1, g2, g3 = "65533", "65532", "65531"
)

// asU1 and asU2 prefix a step with a user's credentials.
func asU1(s string) string { return "-u " + u1 + " -g " + g1 + "," + g2 + " " + s }
func asU2(s string) string { return "-u " + u2 + " -g " + g2 + " " + s }

// fileTypes are the kinds of file every per-type case makes.
var fileTypes = []string{"regular", "dir", "fifo", "block", "char", "socket", "symlink"}

// makeFile is the step that makes a file of kind typ at p (pjdfstest's
// create_file).
func makeFile(typ, p string) string {
	switch typ {
	case "regular":
		return "create " + p + " 0644"
	case "dir":
		return "mkdir " + p + " 0755"
	case "fifo":
		return "mkfifo " + p + " 0644"
	case "block":
		return "mknod " + p + " b 0644 1 2"
	case "char":
		return "mknod " + p + " c 0644 1 2"
	case "socket":
		return "bind " + p
	case "symlink":
		return "symlink test " + p
	}
	panic(typ)
}

// removeFile is the step that removes a file of kind typ.
func removeFile(typ, p string) string {
	if typ == "dir" {
		return "rmdir " + p
	}
	return "unlink " + p
}

func steps(s ...string) []string { return s }

// posixCases are the four kinds of issue 18: special files, permission
// checks for other users, ownership of what they make, and attributes
// after each operation.
func posixCases() []posixCase {
	var cs []posixCase
	cs = append(cs, specialCases()...)
	cs = append(cs, permissionCases()...)
	cs = append(cs, ownershipCases()...)
	cs = append(cs, attributeCases()...)
	cs = append(cs, errnoCases()...)
	return cs
}

// specialCases: every kind of file can be made, renamed, linked,
// changed and removed, by root and by another user.
func specialCases() []posixCase {
	var cs []posixCase
	for _, typ := range fileTypes {
		cs = append(cs, posixCase{"make-" + typ, steps(
			makeFile(typ, "n0"),
			"lstat n0 type,mode,uid,gid,nlink",
			"lstat n0 rdev",
			makeFile(typ, "n0"),
			"rename n0 n1",
			"lstat n0 type",
			"lstat n1 type,mode",
			"link n1 n2",
			"lstat n1 nlink",
			"lstat n2 type,nlink",
			removeFile(typ, "n2"),
			"lstat n1 nlink",
			removeFile(typ, "n1"),
			"lstat n1 type",
			"mkdir d 0777",
			asU1(makeFile(typ, "d/u")),
			"lstat d/u type,uid,gid",
			asU1(removeFile(typ, "d/u")),
			"lstat d/u type",
		)})
		if typ != "symlink" {
			cs = append(cs, posixCase{"chmod-chown-" + typ, steps(
				makeFile(typ, "n0"),
				"chmod n0 0600",
				"lstat n0 mode",
				"chmod n0 01777",
				"lstat n0 mode",
				"chown n0 123 456",
				"lstat n0 uid,gid",
				"lchown n0 "+u1+" "+g1,
				"lstat n0 uid,gid,mode",
				asU1("chmod n0 0640"),
				"lstat n0 mode",
				asU2("chmod n0 0644"),
				"lstat n0 mode",
			)})
		}
	}
	return cs
}

// permissionCases: what another user may not do to root's files, and
// the sticky directory's rules.
func permissionCases() []posixCase {
	cs := []posixCase{
		{"open-modes", steps(
			"create r644 0644", "create r600 0600", "create r666 0666",
			asU1("open r644 O_RDONLY"), asU1("open r644 O_WRONLY"), asU1("open r644 O_RDWR"),
			asU1("open r600 O_RDONLY"), asU1("open r666 O_RDWR"), asU1("open r644 O_RDONLY,O_TRUNC"),
			asU1("open r666 O_WRONLY,O_TRUNC"), asU1("truncate r644 0"), asU1("truncate r666 5"),
			"lstat r666 size", asU1("write r644"), asU1("write r666"), "lstat r666 size",
		)},
		{"dir-write", steps(
			"mkdir d 0755", "create d/f 0644", "mkdir d/s 0755",
			asU1("create d/x 0644"), asU1("mkdir d/x 0755"), asU1("mkfifo d/x 0644"), asU1("bind d/x"),
			asU1("symlink t d/x"), asU1("link d/f d/x"), asU1("unlink d/f"), asU1("rmdir d/s"),
			asU1("rename d/f d/g"), "mkdir w 0777", asU1("rename d/f w/f"), asU1("rename w d/f"),
			"lstat d/f type", "lstat d/x type",
		)},
		{"dir-search", steps(
			"mkdir d 0644", "create d/f 0644", "chmod d 0666",
			asU1("lstat d/f type"), asU1("open d/f O_RDONLY"), asU1("create d/g 0644"),
			"chmod d 0711", asU1("lstat d/f type"), asU1("open d/f O_RDONLY"), asU1("create d/g 0644"),
		)},
		{"chmod-others", steps(
			"create f 0644", asU1("chmod f 0777"), "lstat f mode",
			"chown f "+u1+" "+g1, asU1("chmod f 0777"), "lstat f mode",
			asU2("chmod f 0600"), "lstat f mode",
			// A set-group-ID bit set by an owner outside the file's group
			// is dropped.
			"chown f "+u1+" "+g3, asU1("chmod f 02755"), "lstat f mode",
			"chown f "+u1+" "+g2, asU1("chmod f 02755"), "lstat f mode",
		)},
		{"chown-others", steps(
			"create f 0644", "chown f "+u1+" "+g1,
			asU1("chown f "+u2+" -1"), asU1("chown f -1 "+g2), "lstat f uid,gid",
			asU1("chown f -1 "+g3), asU1("chown f "+u1+" "+g1), "lstat f uid,gid",
			asU2("chown f -1 -1"), asU2("chown f -1 "+g2), "lstat f uid,gid",
			asU1("chown f -1 -1"), "lstat f uid,gid",
			"create r 0644", asU1("chown r -1 -1"), asU1("chown r "+u1+" -1"), "lstat r uid,gid",
		)},
		{"link-protected", steps(
			// fs.protected_hardlinks: no link to a file one may not write
			// and does not own; the kernel's rule, on the box's owners.
			"mkdir w 0777", "create r 0644", "create rw 0666", "create mine 0600", "chown mine "+u1+" "+g1,
			asU1("link r w/r"), asU1("link rw w/rw"), asU1("link mine w/mine"), "lstat mine nlink",
		)},
		{"rename-over", steps(
			"mkdir d 0755", "mkdir e 0755", "create e/f 0644", "create f 0644", "mkfifo p 0644",
			"rename f d", "rename d f", "rename d e", "rename p f", "lstat f type", "rename e/f d/f",
			"mkdir e2 0755", "rename e2 e", "lstat e type,nlink", "rename d/f d/f", "rename d d/x",
		)},
		{"utimens-others", steps(
			"create r644 0644", "create r666 0666", "create mine 0644", "chown mine "+u1+" "+g1,
			asU1("utimens r644 now now"), asU1("utimens r666 now now"), asU1("utimens r666 1000 1000"),
			asU1("utimens r666 omit now"), asU1("utimens r666 now omit"),
			asU1("utimens mine 1000 2000"), asU1("utimens mine now now"), asU2("utimens mine now now"),
		)},
	}
	// The sticky directory: only the file's owner, the directory's owner
	// or root removes or renames a name in it.
	for _, typ := range fileTypes {
		cs = append(cs, posixCase{"sticky-" + typ, steps(
			"mkdir s 01777",
			makeFile(typ, "s/root"),
			asU1(makeFile(typ, "s/u1")),
			asU2(removeFile(typ, "s/root")), asU2("rename s/root s/x"), asU2(removeFile(typ, "s/u1")), asU2("rename s/u1 s/x"),
			asU1("rename s/u1 s/u1b"), asU1(removeFile(typ, "s/u1b")),
			asU1(makeFile(typ, "s/u1")), asU2(makeFile(typ, "s/u2")),
			asU2("rename s/u2 s/u1"), asU1("rename s/u1 s/root"), "lstat s/root uid",
			"chown s "+u2+" "+g2, asU2(removeFile(typ, "s/root")), asU2("rename s/u1 s/x"),
			"lstat s/x uid", "lstat s/root type",
		)})
	}
	return cs
}

// ownershipCases: what another user makes is theirs, in their group or
// a set-group-ID directory's; the mode is what they asked under their
// umask.
func ownershipCases() []posixCase {
	var cs []posixCase
	for _, typ := range fileTypes {
		if typ == "block" || typ == "char" {
			continue // only root makes device nodes (mknod needs CAP_MKNOD)
		}
		cs = append(cs, posixCase{"owner-" + typ, steps(
			"mkdir d 0777",
			asU1(makeFile(typ, "d/a")), "lstat d/a type,uid,gid",
			asU2(makeFile(typ, "d/b")), "lstat d/b uid,gid",
			"-g "+g2+" "+makeFile(typ, "d/c"), "lstat d/c uid,gid",
			"mkdir g 0777", "chown g 0 "+g3, "chmod g 02777",
			asU1(makeFile(typ, "g/a")), "lstat g/a type,uid,gid",
			makeFile(typ, "g/r"), "lstat g/r uid,gid",
		)})
	}
	cs = append(cs,
		posixCase{"owner-sgid-dir", steps(
			"mkdir g 0777", "chown g 0 "+g3, "chmod g 02777",
			asU1("mkdir g/d 0755"), "lstat g/d uid,gid,mode",
			asU1("mkdir g/d/e 0700"), "lstat g/d/e uid,gid,mode",
			asU1("create g/f 02755"), "lstat g/f mode,gid",
			"create g/rf 02755", "lstat g/rf mode,gid",
			"-g "+g3+" create g/rg 02755", "lstat g/rg mode,gid",
		)},
		posixCase{"umask", steps(
			"-U 077 create a 0777", "-U 070 create b 0777", "-U 0 create c 0777", "-U 022 create d 04777",
			"lstat a mode", "lstat b mode", "lstat c mode", "lstat d mode",
			"-U 077 mkdir e 0777", "-U 070 mkdir f 0777", "-U 0 mkdir g 01777", "-U 002 mkdir h 0777",
			"lstat e mode", "lstat f mode", "lstat g mode", "lstat h mode",
			"-U 077 mkfifo i 0777", "-U 070 mknod j c 0777 1 3", "-U 0 mknod k b 06777 1 3",
			"lstat i mode", "lstat j mode", "lstat k mode",
			"mkdir w 0777", asU1("-U 0 create w/a 0666"), asU1("-U 027 mkdir w/b 0777"), asU1("-U 0 create w/c 04755"),
			"lstat w/a mode,uid", "lstat w/b mode,uid", "lstat w/c mode,uid",
		)},
	)
	return cs
}

// attributeCases: change times, link counts, set-ID bits after each
// operation.
func attributeCases() []posixCase {
	var cs []posixCase
	ctime := func(name string, setup []string, target, op string) posixCase {
		return posixCase{"ctime-" + name, append(setup, "mark "+target, op, "moved "+target)}
	}
	cs = append(cs,
		ctime("chmod", steps("create f 0644"), "f", "chmod f 0600"),
		ctime("chmod-dir", steps("mkdir d 0755"), "d", "chmod d 0700"),
		ctime("chown", steps("create f 0644"), "f", "chown f "+u1+" "+g1),
		ctime("chown-minus1", steps("create f 0644"), "f", "chown f -1 "+g1),
		ctime("truncate", steps("create f 0644"), "f", "truncate f 10"),
		ctime("write", steps("create f 0644"), "f", "write f"),
		ctime("open-trunc", steps("create f 0644", "truncate f 3"), "f", "open f O_WRONLY,O_TRUNC"),
		ctime("utimens", steps("create f 0644"), "f", "utimens f 1000 1000"),
		ctime("link", steps("create f 0644"), "f", "link f g"),
		ctime("unlink-other-name", steps("create f 0644", "link f g"), "f", "unlink g"),
		ctime("rename", steps("create f 0644"), "f", "rename f g"),
		ctime("rename-dir-parent", steps("mkdir a 0755", "mkdir b 0755", "create a/f 0644"), "b", "rename a/f b/f"),
		ctime("create-parent", steps("mkdir d 0755"), "d", "create d/f 0644"),
		ctime("unlink-parent", steps("mkdir d 0755", "create d/f 0644"), "d", "unlink d/f"),
		ctime("mkfifo-parent", steps("mkdir d 0755"), "d", "mkfifo d/f 0644"),
		ctime("symlink-parent", steps("mkdir d 0755"), "d", "symlink x d/l"),
		ctime("rename-src-parent", steps("mkdir a 0755", "mkdir b 0755", "create a/f 0644"), "a", "rename a/f b/f"),
		ctime("rmdir-parent", steps("mkdir d 0755", "mkdir d/e 0755"), "d", "rmdir d/e"),
		ctime("mkdir-parent", steps("mkdir d 0755"), "d", "mkdir d/e 0755"),
		ctime("link-parent", steps("mkdir d 0755", "create f 0644"), "d", "link f d/g"),
		ctime("truncate-same", steps("create f 0644", "truncate f 5"), "f", "truncate f 5"),
		ctime("open-trunc-empty", steps("create f 0644"), "f", "open f O_WRONLY,O_TRUNC"),
		ctime("chown-same", steps("create f 0644"), "f", "chown f 0 0"),
		ctime("chmod-same", steps("create f 0644"), "f", "chmod f 0644"),
		ctime("utimens-now", steps("create f 0644"), "f", "utimens f now now"),
		ctime("utimens-omit", steps("create f 0644"), "f", "utimens f omit omit"),
		ctime("failed-chown", steps("create f 0644"), "f", asU1("chown f "+u1+" -1")),
		ctime("failed-chmod", steps("create f 0644"), "f", asU1("chmod f 0777")),
		posixCase{"nlink-dirs", steps(
			"mkdir a 0755", "lstat a nlink", "mkdir a/b 0755", "lstat a nlink", "mkdir a/c 0755", "lstat a nlink",
			"create a/f 0644", "lstat a nlink", "mkfifo a/p 0644", "lstat a nlink", "rmdir a/b", "lstat a nlink",
			"mkdir x 0755", "rename a/c x/c", "lstat a nlink", "lstat x nlink", "lstat x/c nlink",
		)},
		posixCase{"nlink-files", steps(
			"create f 0644", "link f g", "link g h", "lstat f nlink", "lstat h nlink",
			"unlink g", "lstat f nlink", "lstat h nlink", "rename h f", "lstat f nlink",
			"mkfifo p 0644", "link p q", "lstat p nlink", "unlink p", "lstat q nlink",
		)},
		posixCase{"nlink-rename-over-link", steps(
			"create f 0644", "link f g", "create h 0644", "lstat g nlink", "rename h f",
			"lstat g nlink", "lstat f nlink", "link g k", "rename g f", "lstat k nlink", "lstat f nlink",
		)},
		// pjdfstest's utimensat/09.t: a link's own times, set with
		// AT_SYMLINK_NOFOLLOW, are the link's, not its target's.
		posixCase{"utimens-symlink", steps(
			"create f 0644", "utimens f 1900000000 1950000000", "symlink f l", "utimens l 1980000000 1990000000",
			"lstat l atime,mtime", "lstat f atime,mtime", "stat l mtime",
		)},
		posixCase{"setid-write", steps(
			"create f 04777", "lstat f mode", asU1("write f"), "lstat f mode",
			"create g 06777", asU1("write g"), "lstat g mode",
			"create h 02767", asU1("write h"), "lstat h mode",
			"create r 04777", "write r", "lstat r mode",
			"create o 04777", "chown o "+u1+" "+g1, "chmod o 04777", asU1("write o"), "lstat o mode",
			"create t 04777", asU1("truncate t 1"), "lstat t mode",
			"create u 02767", asU1("truncate u 1"), "lstat u mode",
			"create v 02767", asU1("open v O_WRONLY,O_TRUNC"), "lstat v mode",
			"create w 02767", "chown w 0 "+g2, asU1("write w"), "lstat w mode",
		)},
	)
	for _, typ := range []string{"regular", "dir", "fifo", "char"} {
		cs = append(cs, posixCase{"setid-chown-" + typ, steps(
			makeFile(typ, "n0"),
			"chown n0 "+u1+" "+g1, "chmod n0 06555", "lstat n0 mode,uid,gid",
			"chown n0 "+u2+" "+g2, "lstat n0 mode,uid,gid",
			"chmod n0 06555", "chown n0 -1 -1", "lstat n0 mode",
			"chown n0 "+u1+" "+g1, "chmod n0 06555",
			asU1("chown n0 "+u1+" "+g2), "lstat n0 mode,uid,gid",
			"chmod n0 06555", asU1("chown n0 -1 -1"), "lstat n0 mode",
			"chmod n0 02545", asU1("chown n0 -1 "+g1), "lstat n0 mode,gid",
		)})
	}
	return cs
}

// errnoCases: the answers a call gets for a bad name or the wrong kind
// of file (pjdfstest's ENAMETOOLONG, ENOTDIR, ELOOP, EISDIR, EEXIST,
// ENOTEMPTY, EINVAL, EPERM, ENXIO files), which the box's own file
// system gives and boxfs must carry as they are.
func errnoCases() []posixCase {
	n255, n256 := strings.Repeat("x", 255), strings.Repeat("y", 256)
	t4095 := strings.Repeat(n255[:127]+"/", 32)[:4095]
	return []posixCase{
		{"enametoolong", steps(
			"create "+n255+" 0644", "lstat "+n255+" type", "create "+n256+" 0644", "mkdir "+n256+" 0755",
			"mkfifo "+n256+" 0644", "symlink t "+n256, "link "+n255+" "+n256, "rename "+n255+" "+n256,
			"lstat "+n256+" type", "unlink "+n256, "rmdir "+n256, "chmod "+n256+" 0644",
			"symlink "+n255+" l", "lstat l size", "open l O_RDONLY", "unlink "+n255,
			// The longest target a symbolic link holds (PATH_MAX less
			// its NUL), and one longer.
			"symlink "+t4095+" m", "lstat m type,size", "symlink "+t4095+"z n", "lstat n type",
		)},
		{"enotdir", steps(
			"create f 0644", "create f/x 0644", "mkdir f/x 0755", "mkfifo f/x 0644", "symlink t f/x",
			"lstat f/x type", "unlink f/x", "rmdir f", "chmod f/x 0644", "truncate f/x 0",
			"open f O_RDONLY,O_DIRECTORY", "mkdir d 0755", "rename d f", "link f/ g", "rename f/ g",
		)},
		{"eloop", steps(
			"symlink l2 l1", "symlink l1 l2", "open l1 O_RDONLY", "create l1/x 0644", "stat l1 type",
			"chmod l1 0644", "truncate l1 0", "lstat l1 type", "create f 0644", "symlink f l3",
			"open l3 O_RDONLY,O_NOFOLLOW", "open l3 O_WRONLY", "stat l3 type", "unlink l1", "unlink l3", "lstat f type",
		)},
		{"eisdir", steps(
			"mkdir d 0755", "open d O_WRONLY", "open d O_RDWR", "open d O_RDONLY", "open d O_RDONLY,O_CREAT 0644",
			"truncate d 0", "unlink d", "create f 0644", "rename f d", "open f/ O_RDONLY", "create g/ 0644", "lstat g type",
		)},
		{"eexist", steps(
			"create f 0644", "create f 0644", "mkdir f 0755", "mkfifo f 0644", "symlink t f", "link f f",
			"bind f", "mknod f c 0644 1 2", "mkdir d 0755", "mkdir d 0755", "create d 0644",
			"open f O_WRONLY,O_CREAT,O_EXCL 0644", "open f O_WRONLY,O_CREAT 0600", "lstat f mode",
			"symlink f l", "open l O_WRONLY,O_CREAT,O_EXCL 0644", "symlink nowhere m", "open m O_WRONLY,O_CREAT,O_EXCL 0644",
			"lstat nowhere type", "open m O_WRONLY,O_CREAT 0644", "lstat nowhere type",
		)},
		{"enotempty", steps(
			"mkdir d 0755", "create d/f 0644", "rmdir d", "mkdir e 0755", "rename e d", "rmdir d/.", "rmdir d/..",
			"rmdir missing", "unlink d/f", "rmdir d", "lstat d type", "rename e/. x", "rename missing x",
		)},
		{"link-kinds", steps(
			"mkdir d 0755", "link d e", "link missing e", "create f 0644", "link f d/f", "link f d",
			"lstat d/f nlink", "symlink f l", "link l m", "lstat m type", "lstat f nlink",
		)},
		{"rename-same", steps(
			"create f 0644", "link f g", "rename f g", "lstat f type", "lstat g nlink",
			"rename f f", "mkdir d 0755", "create d/f 0644", "rename d/f d/../h", "lstat h type",
			"symlink d l", "rename l d", "rename d l", "lstat l type",
		)},
		{"open-kinds", steps(
			"mkfifo p 0644", "open p O_WRONLY", "open p O_RDONLY", "open p O_RDWR", "bind s", "open s O_RDONLY",
			"create f 0644", "open f O_RDONLY,O_TRUNC", "open missing O_RDONLY", "open missing O_WRONLY,O_TRUNC",
			"open new O_RDONLY,O_CREAT 0600", "lstat new type,mode,size",
		)},
		{"open-files", steps(
			"create f 0644", "ftruncate f O_WRONLY 10", "lstat f size", "ftruncate f O_RDONLY 3", "lstat f size",
			"fchmod f O_RDONLY 0600", "lstat f mode", "fchown f O_RDONLY "+u1+" "+g1, "lstat f uid,gid",
			asU1("fchmod f O_RDONLY 0444"), asU1("ftruncate f O_RDONLY 1"), asU2("fchmod f O_RDONLY 0644"),
			"lstat f mode,size", "unlinked f", "lstat f type", "mkdir w 0777", asU1("create w/g 0644"), asU1("unlinked w/g"),
		)},
		{"truncate-sizes", steps(
			"create f 0644", "truncate f 1234567", "lstat f size", "truncate f 0", "lstat f size",
			"truncate f -1", "lstat f size", "mkfifo p 0644", "truncate p 0", "symlink f l", "truncate l 7", "lstat f size",
		)},
	}
}
