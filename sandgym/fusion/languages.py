"""The languages `/run_code` runs: SandboxFusion's names, each with the file
the code is written to, the command that compiles it (None: interpreted)
and the command that runs it, all inside the `polyglot` image
(runtimes/images.py), whose toolchains are Debian's.

Commands are argument lists run in the sandbox's working folder; none
passes through a shell, so nothing of the request reaches a command line.
"""

from __future__ import annotations

from dataclasses import dataclass, field

IMAGE = "recipe:polyglot"

# TypeScript's compiler checks types; Debian ships no @types/node, so the
# Node globals a program uses are declared here (loosely: `any`), and `tsc`
# accepts `require("fs")` and `process.stdin`. The ES library alone, not
# the DOM's (which declares `console`, here too): a tenth of the work.
NODE_GLOBALS_DTS = """\
declare var console: any;
declare var require: any;
declare var process: any;
declare var module: any;
declare var exports: any;
declare var Buffer: any;
declare var __dirname: string;
declare var __filename: string;
"""

# The JVM sizes its heap and thread pools from the machine; a sandbox is
# small. Serial GC and C1 only: fewer threads (gVisor's pids bound) and a
# faster start for short programs.
# Its reservations are sized to fit the sandbox's address-space limit.
_JVM = (
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Xss16m",
    "-Xmx512m",
    "-XX:CompressedClassSpaceSize=64m",
    "-XX:ReservedCodeCacheSize=64m",
    "-XX:MaxMetaspaceSize=256m",
)


@dataclass(frozen=True)
class Language:
    name: str  # SandboxFusion's name for it
    source: str  # the file the code is written to
    run: tuple[str, ...]
    compile: tuple[str, ...] | None = None
    extra_files: dict[str, str] = field(default_factory=dict)  # written beside the source
    env: dict[str, str] = field(default_factory=dict)


LANGUAGES: dict[str, Language] = {
    lang.name: lang
    for lang in (
        Language("python", "main.py", ("python3", "main.py")),
        Language(
            "cpp",
            "main.cpp",
            ("./main",),
            compile=("g++", "-std=c++17", "-O2", "-o", "main", "main.cpp"),
        ),
        Language("nodejs", "main.js", ("node", "main.js")),
        Language(
            "typescript",
            "main.ts",
            ("node", "main.js"),
            compile=(
                "tsc",
                *("--target", "es2020", "--lib", "es2020", "--module", "commonjs", "--skipLibCheck"),
                *("main.ts", "node-globals.d.ts"),
            ),
            extra_files={"node-globals.d.ts": NODE_GLOBALS_DTS},
        ),
        Language(
            "go",
            "main.go",
            ("./main",),
            compile=("go", "build", "-o", "main", "main.go"),
            # The build cache lives in the sandbox's /tmp: nothing survives it.
            env={"GOCACHE": "/tmp/go-cache", "GOPATH": "/tmp/go", "GO111MODULE": "off", "CGO_ENABLED": "0"},
        ),
        Language(
            "java",
            "Main.java",
            ("java", *_JVM, "-cp", ".", "Main"),
            compile=("javac", *(f"-J{o}" for o in _JVM), "-encoding", "UTF-8", "Main.java"),
        ),
        Language(
            "rust",
            "main.rs",
            ("./main",),
            compile=("rustc", "--edition", "2021", "-O", "-o", "main", "main.rs"),
        ),
        Language("bash", "main.sh", ("bash", "main.sh")),
        Language("php", "main.php", ("php", "main.php")),
        Language("ruby", "main.rb", ("ruby", "main.rb")),
        Language("lua", "main.lua", ("lua5.4", "main.lua")),
        Language("perl", "main.pl", ("perl", "main.pl")),
        # SandboxFusion's D mode runs a module's unittest blocks; a module
        # with no main() of its own gets an empty one (-fmain).
        Language(
            "D_ut",
            "main.d",
            ("./main",),
            compile=("gdc", "-funittest", "-fmain", "-o", "main", "main.d"),
        ),
        Language("R", "main.R", ("Rscript", "main.R")),
        # Mono's C# compiler (C# 7) and runtime.
        Language("csharp", "main.cs", ("mono", "main.exe"), compile=("mcs", "-out:main.exe", "main.cs")),
        # Scala 2.11 on the JDK above; its launchers read the JVM's options here.
        Language(
            "scala",
            "Main.scala",
            ("scala", "-cp", ".", "Main"),
            compile=("scalac", "-d", ".", "Main.scala"),
            env={"JAVA_OPTS": " ".join(_JVM)},
        ),
        # `raco make` compiles the module (and reports syntax errors) ahead of the run.
        Language("racket", "main.rkt", ("racket", "main.rkt"), compile=("raco", "make", "main.rkt")),
    )
}

# Every command sees these; HOME is the sandbox's own /tmp (compilers that
# keep caches there write nothing elsewhere).
BASE_ENV = {"HOME": "/tmp", "LANG": "C.UTF-8", "PATH": "/usr/local/bin:/usr/bin:/bin"}


def language(name: str) -> Language:
    """The language `name`; the error lists the supported ones."""
    try:
        return LANGUAGES[name]
    except KeyError:
        raise ValueError(f"unsupported language {name!r}; supported: {', '.join(LANGUAGES)}") from None
