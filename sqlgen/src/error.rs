//! sqlgen's one error: a message that says where it happened (a file, a statement, a
//! function), each caller on the way up naming its part with [`Error::within`].
use std::fmt;
use std::path::Path;

/// What went wrong, with where.
#[derive(Debug, PartialEq, Eq)]
pub struct Error(String);

/// sqlgen's results.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// The same error, said to have happened in `place` ("place: what").
    pub fn within(self, place: impl fmt::Display) -> Error {
        Error(format!("{place}: {}", self.0))
    }

    /// A file that could not be read or written.
    pub fn io(path: &Path, e: std::io::Error) -> Error {
        Error(format!("{}: {e}", path.display()))
    }
}

impl From<String> for Error {
    fn from(message: String) -> Error {
        Error(message)
    }
}

impl From<&str> for Error {
    fn from(message: &str) -> Error {
        Error(message.to_owned())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}
