//! Dictation through the deployment's transcription (hosted-agent.md "Dictating a message"): a
//! browser's recording sent to an OpenAI-compatible `/audio/transcriptions` endpoint, its words
//! streamed back as JSON lines.
//!
//! Owns: [`Transcription`] — what a recording is ([`sniff_audio`]: a browser's WebM, Ogg or MP4
//! recording, a WAV or an MP3, decided from the bytes), the one request made to the provider
//! (the recording and the model, nothing else, DICT-03), and reading its answer as it streams
//! (server-sent `transcript.text.delta` / `transcript.text.done` events, or one JSON `{text}`
//! from a model that does not stream) into [`Line`]s: `delta`, then `text`, or `error` where
//! the provider stopped part way (DICT-04).
//! Does not own: who may dictate, the body's cap while it is read, or the answer's framing (the
//! transport layer); the settings (`TRANSCRIPTION_*` in [`crate::config`]).
//!
//! Invariants: the provider is sent the recording and the model name only — no document, no
//! login, no token of a person; the key is the operator's and is never logged.

use std::sync::Arc;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use serde_json::{json, Value};

use crate::config::TranscriptionSettings;
use crate::harness::transport::{BodyStream, HttpTransport};
use crate::runtime::SharedEntropy;

/// What the session names as the transcription's provider (`transcription.provider`).
pub const PROVIDER_NAME: &str = "openai";
/// The most bytes of the provider's answer read.
pub const ANSWER_MAX_BYTES: usize = 4 * 1024 * 1024;

/// One line of the answer (DICT-04).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// Words added.
    Delta(String),
    /// All the words: the last line.
    Text(String),
    /// The provider stopped part way: the last line.
    Error(String),
}

impl Line {
    /// The line as the browser reads it: `{"delta"}`, `{"text"}` or `{"error"}`, then `\n`.
    pub fn json_line(&self) -> String {
        let v = match self {
            Line::Delta(d) => json!({ "delta": d }),
            Line::Text(t) => json!({ "text": t }),
            Line::Error(e) => json!({ "error": e }),
        };
        format!("{v}\n")
    }
}

/// A recording's type and the file name it is sent under, decided from its bytes: a browser's
/// recording (WebM, Ogg, MP4/M4A), a WAV or an MP3; `None` for anything else (not audio,
/// RULINGS DICT-07).
pub fn sniff_audio(bytes: &[u8]) -> Option<(&'static str, &'static str)> {
    let found = infer::get(bytes)?.mime_type();
    Some(match found {
        "video/webm" | "audio/webm" => ("audio/webm", "recording.webm"),
        "audio/ogg" | "audio/opus" => ("audio/ogg", "recording.ogg"),
        "video/mp4" | "audio/mp4" | "audio/m4a" | "audio/x-m4a" => ("audio/mp4", "recording.m4a"),
        "audio/x-wav" | "audio/wav" => ("audio/wav", "recording.wav"),
        "audio/mpeg" => ("audio/mpeg", "recording.mp3"),
        _ => return None,
    })
}

/// Why a transcription could not start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failed(pub String);

/// The deployment's transcription (see the module docs).
pub struct Transcription {
    settings: TranscriptionSettings,
    transport: Arc<dyn HttpTransport>,
    entropy: SharedEntropy,
}

impl Transcription {
    pub fn new(
        settings: TranscriptionSettings,
        transport: Arc<dyn HttpTransport>,
        entropy: SharedEntropy,
    ) -> Self {
        Transcription {
            settings,
            transport,
            entropy,
        }
    }

    /// The longest recording taken, in bytes.
    pub fn max_bytes(&self) -> u64 {
        self.settings.max_bytes
    }

    /// As `session:hello` names it (DICT-06): `{provider, maxBytes}`.
    pub fn hello(&self) -> Value {
        json!({ "provider": PROVIDER_NAME, "maxBytes": self.settings.max_bytes })
    }

    /// Sends `audio` (of type `mime`, named `file_name`) to the provider; its words as they
    /// come. An error: the provider could not be reached or refused the recording.
    pub async fn transcribe(
        &self,
        audio: Vec<u8>,
        mime: &str,
        file_name: &str,
    ) -> Result<impl Stream<Item = Line> + Send + 'static, Failed> {
        let boundary = format!("chopin-{}", self.entropy.token_hex(12));
        let body = multipart(
            &boundary,
            &[("model", &self.settings.model), ("stream", "true")],
            ("file", file_name, mime, &audio),
        );
        let url = format!(
            "{}/audio/transcriptions",
            self.settings.base_url.trim_end_matches('/')
        );
        let mut request = http::Request::post(&url).header(
            http::header::CONTENT_TYPE,
            format!("multipart/form-data; boundary={boundary}"),
        );
        if let Some(key) = &self.settings.api_key {
            request = request.header(
                http::header::AUTHORIZATION,
                format!("Bearer {}", key.expose()),
            );
        }
        let request = request
            .body(Bytes::from(body))
            .map_err(|e| Failed(format!("the transcription request could not be made: {e}")))?;
        let response = self
            .transport
            .send(request, ANSWER_MAX_BYTES)
            .await
            .map_err(|e| {
                Failed(format!(
                    "the transcription service could not be reached: {e}"
                ))
            })?;
        let (head, body) = response.into_parts();
        if !head.status.is_success() {
            let said = read_all(body).await;
            let detail = serde_json::from_slice::<Value>(&said)
                .ok()
                .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
                .unwrap_or_default();
            tracing::warn!(status = %head.status, %detail, "the transcription service refused a recording");
            return Err(Failed(format!(
                "The transcription service answered {}{}.",
                head.status.as_u16(),
                if detail.is_empty() {
                    String::new()
                } else {
                    format!(": {detail}")
                }
            )));
        }
        let streamed = head
            .headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.starts_with("text/event-stream"));
        Ok(if streamed {
            events(body).boxed()
        } else {
            futures::stream::once(async move {
                let whole = read_all(body).await;
                match serde_json::from_slice::<Value>(&whole)
                    .ok()
                    .and_then(|v| v["text"].as_str().map(str::to_owned))
                {
                    Some(text) => Line::Text(text),
                    None => Line::Error("The transcription service's answer had no text.".into()),
                }
            })
            .boxed()
        })
    }
}

/// The whole of a (small) body; what was read before an error.
async fn read_all(mut body: BodyStream) -> Vec<u8> {
    let mut all = Vec::new();
    while let Some(Ok(chunk)) = body.next().await {
        all.extend_from_slice(&chunk);
    }
    all
}

/// The server-sent events of a streamed transcription as lines: each delta, then the text; an
/// `error` line where the stream broke off or said so, and nothing after it.
fn events(body: BodyStream) -> impl Stream<Item = Line> + Send + 'static {
    let frames = body.map(|chunk| chunk.map(http_body::Frame::data));
    let sse = sse_stream::SseStream::new(http_body_util::StreamBody::new(frames));
    futures::stream::unfold(
        (Box::pin(sse), String::new(), false),
        |(mut sse, mut said, done)| async move {
            if done {
                return None;
            }
            loop {
                let line = match sse.next().await {
                    None => Line::Error(format!(
                        "The transcription stopped part way{}.",
                        if said.is_empty() {
                            ""
                        } else {
                            " after some words"
                        }
                    )),
                    Some(Err(e)) => Line::Error(format!("The transcription broke off: {e}")),
                    Some(Ok(event)) => {
                        let Some(data) = event.data else { continue };
                        if data.trim() == "[DONE]" {
                            continue;
                        }
                        let Ok(v) = serde_json::from_str::<Value>(&data) else {
                            continue;
                        };
                        match v["type"].as_str() {
                            Some("transcript.text.delta") => {
                                let delta = v["delta"].as_str().unwrap_or_default().to_owned();
                                said.push_str(&delta);
                                return Some((Line::Delta(delta), (sse, said, false)));
                            }
                            Some("transcript.text.done") => Line::Text(
                                v["text"]
                                    .as_str()
                                    .map_or_else(|| said.clone(), str::to_owned),
                            ),
                            Some("error") => Line::Error(
                                v["error"]["message"]
                                    .as_str()
                                    .unwrap_or("The transcription service reported an error.")
                                    .to_owned(),
                            ),
                            _ => continue,
                        }
                    }
                };
                return Some((line, (sse, said, true)));
            }
        },
    )
}

/// A `multipart/form-data` body of `fields` and one file part.
fn multipart(
    boundary: &str,
    fields: &[(&str, &str)],
    (field, file_name, mime, bytes): (&str, &str, &str, &[u8]),
) -> Vec<u8> {
    let mut body = Vec::with_capacity(bytes.len() + 512);
    for (name, value) in fields {
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
            )
            .as_bytes(),
        );
    }
    body.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"{field}\"; filename=\"{file_name}\"\r\nContent-Type: {mime}\r\n\r\n"
        )
        .as_bytes(),
    );
    body.extend_from_slice(bytes);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dict_03_dict_07_recordings_are_known_by_their_bytes() {
        let wav = b"RIFF\x24\x00\x00\x00WAVEfmt \x10\x00\x00\x00";
        assert_eq!(sniff_audio(wav), Some(("audio/wav", "recording.wav")));
        assert_eq!(
            sniff_audio(b"ID3\x04\x00\x00\x00\x00\x00\x00"),
            Some(("audio/mpeg", "recording.mp3"))
        );
        // The EBML head a browser's MediaRecorder writes: doctype "webm".
        let mut webm = vec![
            0x1A, 0x45, 0xDF, 0xA3, 0x9F, 0x42, 0x86, 0x81, 0x01, 0x42, 0xF7, 0x81, 0x01, 0x42,
            0xF2, 0x81, 0x04, 0x42, 0xF3, 0x81, 0x08, 0x42, 0x82, 0x84, b'w', b'e', b'b', b'm',
        ];
        webm.resize(512, 0);
        assert_eq!(sniff_audio(&webm), Some(("audio/webm", "recording.webm")));
        assert_eq!(
            sniff_audio(b"OggS\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00"),
            Some(("audio/ogg", "recording.ogg"))
        );
        assert_eq!(sniff_audio(b"hello, I am text"), None);
        assert_eq!(
            sniff_audio(&[0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a]),
            None
        );
    }

    #[test]
    fn a_multipart_body_holds_the_fields_and_the_file_and_nothing_else() {
        let body = multipart(
            "b",
            &[("model", "m")],
            ("file", "r.wav", "audio/wav", b"RIFF"),
        );
        assert_eq!(
            String::from_utf8(body).unwrap(),
            "--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nm\r\n--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"r.wav\"\r\nContent-Type: audio/wav\r\n\r\nRIFF\r\n--b--\r\n"
        );
    }

    #[test]
    fn lines_are_json_each_on_its_own_line() {
        assert_eq!(
            Line::Delta("hi \"x\"".into()).json_line(),
            "{\"delta\":\"hi \\\"x\\\"\"}\n"
        );
        assert_eq!(Line::Text("hi".into()).json_line(), "{\"text\":\"hi\"}\n");
        assert_eq!(Line::Error("no".into()).json_line(), "{\"error\":\"no\"}\n");
    }
}
