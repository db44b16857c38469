"""The languages `/run_code` runs: SandboxFusion's names, each with the file
the code is written to, the command that compiles it (None: interpreted)
and the command that runs it, all inside the `polyglot` image
(runtimes/images.py), whose toolchains are Debian's.

Commands are argument lists run in the sandbox's working folder; none
passes through a shell, so nothing of the request reaches a command line.
"""

from __future__ import annotations

import re
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


# A command's argument that stands for the source file's name (a test
# mode whose file is named after the code's public class).
SOURCE = "<source>"

# The build cache lives in the sandbox's /tmp: nothing survives it.
_GO_ENV = {"GOCACHE": "/tmp/go-cache", "GOPATH": "/tmp/go", "GO111MODULE": "off", "CGO_ENABLED": "0"}


@dataclass(frozen=True)
class Language:
    name: str  # SandboxFusion's name for it
    source: str  # the file the code is written to
    run: tuple[str, ...]
    compile: tuple[str, ...] | None = None
    extra_files: dict[str, str] = field(default_factory=dict)  # written beside the source
    env: dict[str, str] = field(default_factory=dict)
    # Java's rule: the file is named after its public class (else `source`).
    named_by_public_class: bool = False

    def source_for(self, code: str) -> str:
        """The name the code's file gets in the working folder."""
        if self.named_by_public_class and (m := _PUBLIC_CLASS.search(code)):
            return f"{m.group(1)}.java"
        return self.source

    def argv(self, command: tuple[str, ...], source: str) -> list[str]:
        return [source if a == SOURCE else a for a in command]


# An identifier only (no path, no leading dash): it becomes a file name.
_PUBLIC_CLASS = re.compile(r"^\s*public\s+(?:(?:final|abstract)\s+)*class\s+([A-Za-z_][A-Za-z0-9_]{0,99})\b", re.M)


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
            env=_GO_ENV,
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

# SandboxFusion's test modes: the code is a test file, run by its
# language's test runner; the runner's exit code is the verdict (Success
# when every test passed, Failed with the runner's report otherwise).
JUNIT_JAR = "/usr/share/java/junit-platform-console-standalone.jar"  # Debian's junit5

# Jest runs JavaScript; SandboxFusion's own Jest strips TypeScript's types
# with Babel and checks none. Here TypeScript's own transpiler does the
# same to every .ts file of the working folder (a syntax error is a
# compile failure, a type error is not).
TRANSPILE_TS = """\
const fs = require("fs");
const path = require("path");
let ts;
try { ts = require("typescript"); } catch (e) { ts = require("/usr/share/nodejs/typescript"); }
let failed = false;
function walk(dir) {
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const name = path.join(dir, entry.name);
    if (entry.isDirectory() && entry.name !== "node_modules") walk(name);
    if (!entry.isFile() || !/\\.tsx?$/.test(name) || name.endsWith(".d.ts")) continue;
    const out = ts.transpileModule(fs.readFileSync(name, "utf8"), {
      fileName: name,
      reportDiagnostics: true,
      compilerOptions: { target: ts.ScriptTarget.ES2020, module: ts.ModuleKind.CommonJS, jsx: ts.JsxEmit.React },
    });
    for (const d of out.diagnostics || []) {
      const where = d.file ? d.file.getLineAndCharacterOfPosition(d.start) : { line: 0, character: 0 };
      const text = ts.flattenDiagnosticMessageText(d.messageText, "\\n");
      console.error(`${name}(${where.line + 1},${where.character + 1}): ${text}`);
      failed = true;
    }
    fs.writeFileSync(name.replace(/\\.tsx?$/, ".js"), out.outputText);
  }
}
walk(".");
process.exitCode = failed ? 1 : 0;
"""

JEST_CONFIG = '{"testRegex": "\\\\.(test|spec)\\\\.jsx?$", "transform": {}, "cacheDirectory": "/tmp/jest-cache"}\n'

TEST_MODES: dict[str, Language] = {
    lang.name: lang
    for lang in (
        # pytest on the file (Debian's python3-pytest); no cache folder left behind.
        Language(
            "pytest",
            "test_main.py",
            ("python3", "-m", "pytest", "-p", "no:cacheprovider", "test_main.py"),
            env={"PYTHONDONTWRITEBYTECODE": "1"},
        ),
        # `go test` on the file, with the Go settings above.
        Language(
            "go_test",
            "main_test.go",
            ("go", "test", "main_test.go"),
            env=_GO_ENV,
        ),
        # JUnit 5: the file is compiled against the console launcher, which
        # then finds the tests on the class path.
        Language(
            "junit",
            "Main.java",
            (
                *("java", *_JVM, "-jar", JUNIT_JAR),
                *("--disable-banner", "--disable-ansi-colors", "--class-path", ".", "--scan-class-path"),
            ),
            compile=(
                *("javac", *(f"-J{o}" for o in _JVM), "-encoding", "UTF-8"),
                *("-cp", f".:{JUNIT_JAR}", "-sourcepath", ".", "-d", ".", SOURCE),
            ),
            named_by_public_class=True,
        ),
        # Jest (Debian's jest) on the transpiled file, in one process.
        # Debian's Jest wants a config file; no transform (the code is JS by then).
        Language(
            "jest",
            "main.test.ts",
            ("jest", "--ci", "--runInBand", "--no-watchman", "--config", "jest.config.json"),
            compile=("node", "transpile-ts.js"),
            extra_files={"transpile-ts.js": TRANSPILE_TS, "jest.config.json": JEST_CONFIG},
        ),
    )
}

# Every name `/run_code` takes: programs, then test modes.
RUNNABLE: dict[str, Language] = {**LANGUAGES, **TEST_MODES}

# Every command sees these; HOME is the sandbox's own /tmp (compilers that
# keep caches there write nothing elsewhere).
BASE_ENV = {"HOME": "/tmp", "LANG": "C.UTF-8", "PATH": "/usr/local/bin:/usr/bin:/bin"}


def language(name: str) -> Language:
    """The language or test mode `name`; the error lists the supported ones."""
    try:
        return RUNNABLE[name]
    except KeyError:
        raise ValueError(f"unsupported language {name!r}; supported: {', '.join(RUNNABLE)}") from None
