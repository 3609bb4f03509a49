//! Codecs, chosen by the `Content-Type` header: MessagePack with named fields
//! (the default on the wire), JSON (for people and scripts) and protobuf
//! (the messages of `proto/a2ap.proto`, for peers with generated code; see
//! [`crate::proto`]).

use serde::{Serialize, de::DeserializeOwned};

use crate::error::{ErrorBody, ErrorCode};

/// `Content-Type` of MessagePack payloads.
pub const MSGPACK: &str = "application/msgpack";
/// `Content-Type` of JSON payloads.
pub const JSON: &str = "application/json";
/// `Content-Type` of protobuf payloads (`proto/a2ap.proto`).
pub const PROTOBUF: &str = "application/protobuf";
/// `Content-Type` of plain-text missions (accepted on `boss.missions` only).
pub const TEXT: &str = "text/plain";

/// The media type of a `Content-Type` value, lower-cased, without parameters.
pub fn essence(content_type: &str) -> String {
    content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// A wire encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Codec {
    /// MessagePack with named fields (`rmp_serde::to_vec_named`), so field
    /// order does not matter and a peer can add fields.
    #[default]
    MsgPack,
    /// UTF-8 JSON.
    Json,
    /// Protobuf: the message of `proto/a2ap.proto` named as the type is.
    Protobuf,
}

/// Why bytes could not be encoded or decoded.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// The payload is not valid in the declared codec or does not fit the type.
    #[error("cannot decode {codec} payload: {reason}")]
    Decode {
        /// The codec that was tried.
        codec: &'static str,
        /// What the decoder said.
        reason: String,
    },
    /// The value cannot be represented (a map with non-string keys in JSON, ...).
    #[error("cannot encode as {codec}: {reason}")]
    Encode {
        /// The codec that was tried.
        codec: &'static str,
        /// What the encoder said.
        reason: String,
    },
    /// The `Content-Type` names no codec Swarm speaks.
    #[error(
        "unsupported content type {0:?}: use application/msgpack, application/json or application/protobuf"
    )]
    UnsupportedContentType(String),
}

impl From<CodecError> for ErrorBody {
    fn from(e: CodecError) -> Self {
        let code = match e {
            CodecError::UnsupportedContentType(_) => ErrorCode::ValidationFailed,
            CodecError::Decode { .. } => ErrorCode::DecodeFailed,
            CodecError::Encode { .. } => ErrorCode::Internal,
        };
        ErrorBody::new(code, e.to_string())
    }
}

impl Codec {
    /// The codec a `Content-Type` names; MessagePack when there is none.
    /// Parameters such as `; charset=utf-8` are ignored.
    pub fn from_content_type(content_type: Option<&str>) -> Result<Codec, CodecError> {
        let Some(ct) = content_type else {
            return Ok(Codec::MsgPack);
        };
        match essence(ct).as_str() {
            "" | MSGPACK | "application/x-msgpack" | "application/vnd.msgpack" => {
                Ok(Codec::MsgPack)
            }
            JSON => Ok(Codec::Json),
            PROTOBUF | "application/x-protobuf" | "application/vnd.google.protobuf" => {
                Ok(Codec::Protobuf)
            }
            _ => Err(CodecError::UnsupportedContentType(ct.to_string())),
        }
    }

    /// The `Content-Type` to put on a payload in this codec.
    pub fn content_type(self) -> &'static str {
        match self {
            Codec::MsgPack => MSGPACK,
            Codec::Json => JSON,
            Codec::Protobuf => PROTOBUF,
        }
    }

    /// The codec's short name, as the `--codec` flag spells it.
    pub fn name(self) -> &'static str {
        match self {
            Codec::MsgPack => "msgpack",
            Codec::Json => "json",
            Codec::Protobuf => "protobuf",
        }
    }

    /// The codec a `--codec` flag names: `msgpack`, `json` or `protobuf`.
    pub fn from_name(name: &str) -> Option<Codec> {
        [Codec::MsgPack, Codec::Json, Codec::Protobuf]
            .into_iter()
            .find(|c| c.name().eq_ignore_ascii_case(name.trim()))
    }

    /// Encodes a value.
    pub fn encode<T: Serialize + ?Sized>(self, value: &T) -> Result<Vec<u8>, CodecError> {
        self.encode_sized(value, 0)
    }

    /// Encodes a value into a buffer that starts with room for `capacity`
    /// bytes: for a large value whose size is about known, no regrowth.
    pub fn encode_sized<T: Serialize + ?Sized>(
        self,
        value: &T,
        capacity: usize,
    ) -> Result<Vec<u8>, CodecError> {
        let mut buf = Vec::with_capacity(capacity);
        let r = match self {
            Codec::MsgPack => value
                .serialize(&mut rmp_serde::Serializer::new(&mut buf).with_struct_map())
                .map_err(|e| e.to_string()),
            Codec::Json => serde_json::to_writer(&mut buf, value).map_err(|e| e.to_string()),
            // Through the JSON value: the serde types are the one truth.
            Codec::Protobuf => crate::proto::message_for::<T>().and_then(|desc| {
                let json = serde_json::to_value(value).map_err(|e| e.to_string())?;
                buf = crate::proto::encode_json(&desc, &json)?;
                Ok(())
            }),
        };
        let r = r.map(|()| buf);
        r.map_err(|reason| CodecError::Encode {
            codec: self.name(),
            reason,
        })
    }

    /// Decodes a value.
    pub fn decode<T: DeserializeOwned>(self, bytes: &[u8]) -> Result<T, CodecError> {
        let r = match self {
            Codec::MsgPack => rmp_serde::from_slice(bytes).map_err(|e| e.to_string()),
            Codec::Json => serde_json::from_slice(bytes).map_err(|e| e.to_string()),
            Codec::Protobuf => crate::proto::message_for::<T>()
                .and_then(|desc| crate::proto::decode_json(&desc, bytes))
                .and_then(|json| serde_json::from_value(json).map_err(|e| e.to_string())),
        };
        r.map_err(|reason| CodecError::Decode {
            codec: self.name(),
            reason,
        })
    }
}
