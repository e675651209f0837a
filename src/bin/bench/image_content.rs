//! The bytes of the benchmark images' files: deterministic (the same on every machine and
//! run, so the same digests), incompressible or compressing like a real image's files.

/// A deterministic xorshift generator: every run builds the same bytes, so the same digests.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number below `n`, skewed towards 0 when `skew` (a word's frequency in a text).
    pub fn below(&mut self, n: usize, skew: bool) -> usize {
        let a = (self.next() % n as u64) as usize;
        if skew {
            a * (self.next() % n as u64) as usize / n
        } else {
            a
        }
    }
}

/// Deterministic incompressible bytes.
pub fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut r = Rng::new(seed);
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        out.extend_from_slice(&r.next().to_le_bytes());
    }
    out.truncate(len);
    out
}

/// The kinds of file a real image holds, by how they compress (gzip's default level, this mix
/// as a whole about 2.5 to 1, as a distribution image's layers do): sources, scripts, configs and
/// documents; machine code and libraries; data that is compressed already (archives, images).
#[derive(Clone, Copy)]
pub enum Kind {
    Text,
    Code,
    Packed,
}

/// Words of sources and configuration files, the commoner first.
const WORDS: &[&str] = &[
    "the",
    "=",
    "if",
    "return",
    "self",
    "0",
    "1",
    "in",
    "for",
    "def",
    "import",
    "from",
    "None",
    "const",
    "int",
    "char",
    "void",
    "static",
    "struct",
    "else",
    "while",
    "true",
    "false",
    "not",
    "and",
    "or",
    "is",
    "a",
    "to",
    "of",
    "this",
    "new",
    "string",
    "value",
    "name",
    "type",
    "data",
    "size",
    "len",
    "error",
    "err",
    "nil",
    "func",
    "package",
    "class",
    "public",
    "private",
    "use",
    "let",
    "mut",
    "fn",
    "impl",
    "match",
    "Some",
    "Ok",
    "Err",
    "config",
    "path",
    "file",
    "buffer",
    "index",
    "count",
    "result",
    "object",
    "list",
    "dict",
    "key",
    "items",
    "args",
    "kwargs",
    "options",
    "default",
    "version",
    "module",
    "export",
    "require",
    "function",
    "var",
    "await",
    "async",
    "try",
    "except",
    "raise",
    "finally",
    "with",
    "as",
    "lambda",
    "yield",
    "assert",
    "unsigned",
    "long",
    "double",
    "float",
    "bool",
    "uint32_t",
    "size_t",
    "NULL",
    "sizeof",
    "include",
    "define",
    "endif",
    "ifdef",
    "http",
    "https",
    "localhost",
    "usr",
    "lib",
    "share",
    "bin",
    "etc",
    "license",
    "copyright",
    "software",
    "without",
    "warranty",
    "GNU",
    "General",
    "Public",
    "License",
    "distributed",
    "permission",
    "notice",
    "provided",
    "conditions",
];
const PUNCT: &[&str] = &[
    " ", " ", " ", ", ", "(", ")", ".", ": ", " = ", "; ", "_", "->", "[", "]",
];

/// `len` bytes of a file of this kind.
pub fn content(kind: Kind, r: &mut Rng, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 64);
    match kind {
        Kind::Text => {
            // Lines of skewed words; a third of them repeat one of the last 32 lines, as sources
            // and configuration files repeat their phrases.
            let mut lines: Vec<(usize, usize)> = Vec::new();
            while out.len() < len {
                let start = out.len();
                if lines.len() > 32 && r.below(3, false) == 0 {
                    let (a, b) = lines[lines.len() - 1 - r.below(32, false)];
                    out.extend_from_within(a..b);
                } else {
                    out.extend(std::iter::repeat_n(b' ', 4 * r.below(4, true)));
                    for _ in 0..3 + r.below(8, false) {
                        out.extend_from_slice(WORDS[r.below(WORDS.len(), true)].as_bytes());
                        out.extend_from_slice(PUNCT[r.below(PUNCT.len(), true)].as_bytes());
                    }
                    out.push(b'\n');
                }
                lines.push((start, out.len()));
            }
        }
        Kind::Code => {
            // Instructions: an opcode of a small, skewed set, then most often an operand (a
            // register, a small offset, one of a few addresses); functions padded to 16 bytes;
            // now and then a sequence of the last 2 kB again, as compilers repeat theirs.
            while out.len() < len {
                if out.len() > 2048 && r.below(8, false) == 0 {
                    let from = out.len() - 2048 + r.below(2000, false);
                    out.extend_from_within(from..from + 8 + r.below(40, false));
                    continue;
                }
                let op = r.below(48, true) as u8;
                out.extend_from_slice(&[0x40 | (op & 0x0f), 0x80 + op]);
                match r.below(8, false) {
                    0 | 1 => out.push(r.below(16, true) as u8),
                    2 | 3 => out.push((r.below(32, true) * 8) as u8),
                    4 => out.extend_from_slice(
                        &(0x0040_1000 + 16 * r.below(512, true) as u32).to_le_bytes(),
                    ),
                    5 => out.extend_from_slice(&(r.next() as u16).to_le_bytes()),
                    6 if r.below(4, false) == 0 => {
                        out.push(0xc3);
                        out.extend(std::iter::repeat_n(0xcc, 15 - out.len() % 16));
                    }
                    _ => {}
                }
            }
        }
        Kind::Packed => {
            while out.len() < len {
                out.extend_from_slice(&r.next().to_le_bytes());
            }
        }
    }
    out.truncate(len);
    out
}
