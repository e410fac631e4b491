//! The ids of Sluice's records, one type each: a function that takes an application, a
//! namespace and a command cannot be handed them in the wrong order. Each is a UUID on the wire
//! (serde), in PostgreSQL (sqlx, `uuid` columns) and in Redis keys (`Display`).

use std::fmt;

use uuid::Uuid;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(
            Debug,
            Clone,
            Copy,
            PartialEq,
            Eq,
            Hash,
            PartialOrd,
            Ord,
            serde::Serialize,
            serde::Deserialize,
            sqlx::Type,
        )]
        #[serde(transparent)]
        #[sqlx(transparent)]
        pub struct $name(Uuid);

        impl $name {
            pub const fn from_uuid(id: Uuid) -> Self {
                Self(id)
            }

            pub const fn as_uuid(self) -> Uuid {
                self.0
            }

            /// A new, time-ordered id (uuid v7: ids sort by creation time).
            pub fn new_v7() -> Self {
                Self(Uuid::now_v7())
            }
        }

        impl std::str::FromStr for $name {
            type Err = uuid::Error;

            fn from_str(text: &str) -> Result<Self, Self::Err> {
                Uuid::parse_str(text).map(Self)
            }
        }

        impl From<Uuid> for $name {
            fn from(id: Uuid) -> Self {
                Self(id)
            }
        }

        impl From<$name> for Uuid {
            fn from(id: $name) -> Self {
                id.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }
    };
}

id_type!(
    /// An application: the tenant whose namespaces share budgets and one Redis hash tag.
    ApplicationId
);
id_type!(
    /// A namespace of an application: credentials, declarations and pauses live here.
    NamespaceId
);
id_type!(
    /// One accepted command (its row in `commands`).
    CommandId
);
id_type!(
    /// A bearer credential of a namespace (its row in `credentials`; never its secret).
    CredentialId
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_its_uuid_on_the_wire_and_in_text() {
        let uuid = Uuid::now_v7();
        let id = CommandId::from_uuid(uuid);
        assert_eq!(id.to_string(), uuid.to_string());
        assert_eq!(
            serde_json::to_value(id).expect("serialize"),
            serde_json::json!(uuid.to_string())
        );
        let back: CommandId =
            serde_json::from_value(serde_json::json!(uuid.to_string())).expect("deserialize");
        assert_eq!(back.as_uuid(), uuid);
    }
}
