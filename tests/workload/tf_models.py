"""Tiny Keras models for the TensorFlow tests (module:callable targets)."""

from __future__ import annotations

from typing import Any


def tiny_cnn(channels: int = 8) -> Any:
    """Conv 3x3 (3 -> channels, same), batch norm, ReLU, depthwise 3x3, global average pool, dense
    to 4 classes, softmax; input 16x16x3."""
    import keras

    keras.utils.set_random_seed(0)
    x = keras.Input((16, 16, 3))
    y = keras.layers.Conv2D(channels, 3, padding="same", use_bias=False)(x)
    y = keras.layers.BatchNormalization()(y)
    y = keras.layers.ReLU()(y)
    y = keras.layers.DepthwiseConv2D(3, padding="same")(y)
    y = keras.layers.GlobalAveragePooling2D()(y)
    y = keras.layers.Dense(4, activation="softmax")(y)
    return keras.Model(x, y, name="tiny_cnn")


def with_lambda() -> Any:
    """A model holding a Lambda layer: Python code that a .keras file would carry."""
    import keras

    x = keras.Input((4,))
    return keras.Model(x, keras.layers.Lambda(lambda t: t * 2.0)(x), name="with_lambda")


def not_a_model() -> int:
    return 3


def with_custom_op() -> Any:
    """Dense 8 -> a custom layer ``bessel`` computing TensorFlow's BesselI1e (the exponentially
    scaled modified Bessel function, an op neither tf2onnx nor OpenVINO's TensorFlow frontend has
    a conversion for) -> dense to 4; input 8 values."""
    import keras
    import tensorflow as tf

    class Bessel(keras.layers.Layer):
        def call(self, x: Any) -> Any:
            return tf.math.special.bessel_i1e(x)

    keras.utils.set_random_seed(0)
    x = keras.Input((8,))
    y = keras.layers.Dense(4)(Bessel(name="bessel")(keras.layers.Dense(8)(x)))
    return keras.Model(x, y, name="with_custom_op")
