# What identifies a file across nodes (shared with logread and job; stdlib only).
#
# A file's identity, as one node sees it: its size, mtime, inode, device, the mount it
# lives on (filesystem type and source from /proc/self/mountinfo, statvfs's f_fsid),
# this kernel's boot id, and a hash of its first and last FID_BLOCK bytes.  The login
# node groups what every node reported (ddptui/logs/sharedfs.py):
#   - network filesystems (nfs, lustre, gpfs, beegfs, ceph, ...): st_dev is per client
#     mount and differs between nodes, but the inode number is the server's: the same
#     file is (fs type, mount source, inode), or, where clients name the server
#     differently, (inode, size, mtime, both hashes);
#   - any other filesystem (ext4, xfs, tmpfs, overlay): only the same kernel sees the
#     same file, (boot id, st_dev, inode): several "nodes" on one machine (containers,
#     namespaces) share a file; two machines' /tmp never do.
import hashlib
import os
import re
import stat as _stat

FID_BLOCK = 4096  # a page: enough to tell files apart, cheap for thousands of dumps
NETWORK_FS = (
    "nfs", "nfs4", "lustre", "gpfs", "beegfs", "ceph", "cephfs", "cifs", "smb3", "smbfs",
    "glusterfs", "fuse.glusterfs", "wekafs", "fuse.wekafs", "panfs", "afs", "orangefs",
    "pvfs2", "ocfs2", "gfs2", "9p", "virtiofs", "fuse.sshfs", "fuse.juicefs", "fuse.s3fs",
    "quobyte", "fuse.quobyte", "vastfs", "davfs", "fuse.rclone", "fuse.ceph-fuse",
)

_MOUNTS = []
_BOOT = []


def _unescape(field):
    """mountinfo escapes space, tab, newline and backslash as \\ooo."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mounts():
    """[(mount point, "major:minor", fs type, source)] of this mount namespace."""
    if _MOUNTS:
        return _MOUNTS[0]
    found = []
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                left, sep, right = line.partition(" - ")
                a, b = left.split(), right.split()
                if not sep or len(a) < 5 or len(b) < 2:
                    continue
                found.append((_unescape(a[4]), a[2], b[0], _unescape(b[1])))
    except OSError:
        pass
    _MOUNTS.append(found)
    return found


def boot_id():
    if not _BOOT:
        try:
            with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as fh:
                _BOOT.append(fh.read().strip())
        except OSError:
            _BOOT.append("")
    return _BOOT[0]


def mount_of(real, st):
    """(mount point, fs type, source) of the mount `real` lives on: the longest mount
    point above it whose device is the file's, else the longest one above it."""
    dev = "%d:%d" % (os.major(st.st_dev), os.minor(st.st_dev))
    best, best_dev = None, None
    for point, majmin, fstype, source in mounts():
        if real != point and not real.startswith(point.rstrip("/") + "/"):
            continue
        if best is None or len(point) >= len(best[0]):
            best = (point, fstype, source)
        if majmin == dev and (best_dev is None or len(point) >= len(best_dev[0])):
            best_dev = (point, fstype, source)
    return best_dev or best or ("", "?", "")


def _hash(fh, offset, size):
    fh.seek(offset)
    return hashlib.sha256(fh.read(size)).hexdigest()[:16]


def identity(path):
    """What identifies `path` across nodes (a dict), or raises OSError."""
    real = os.path.realpath(path)  # a symlink loop stays a path that stat() refuses
    st = os.stat(path)
    if not _stat.S_ISREG(st.st_mode):
        raise OSError(0, "not a regular file")
    point, fstype, source = mount_of(real, st)
    try:
        fsid = "%x" % os.statvfs(path).f_fsid
    except (OSError, AttributeError):
        fsid = ""
    size = st.st_size
    with open(path, "rb") as fh:
        head = _hash(fh, 0, FID_BLOCK)
        tail = _hash(fh, max(0, size - FID_BLOCK), FID_BLOCK) if size > FID_BLOCK else head
    return {
        "real": real,
        "size": size,
        "mtime_ns": st.st_mtime_ns,
        "ino": st.st_ino,
        "dev": "%d:%d" % (os.major(st.st_dev), os.minor(st.st_dev)),
        "fstype": fstype,
        "source": source,
        "mount": point,
        "fsid": fsid,
        "network": fstype in NETWORK_FS or fstype.startswith("nfs"),
        "boot": boot_id(),
        "head": head,
        "tail": tail,
    }


def identity_or_none(path):
    try:
        return identity(path)
    except OSError:
        return None
